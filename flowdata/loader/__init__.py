"""The training iterator: a group's per-sample work inside torch DataLoader workers.

Modules, each one concept: ``order`` (which samples form each batch), ``lanes`` (which
consumer reads which shards of a stream in shards), ``wire`` (what a
worker sends back), ``datasets`` (the torch datasets running the engine's kernel),
``dataloader`` (``flowdata.DataLoader``), ``build`` (statistics pass, index, dataset).
"""

from flowdata.loader.dataloader import DataLoader
from flowdata.loader.datasets import LaneDataset, PassDataset, StreamDataset
from flowdata.loader.order import EpochBatches, EpochOrder
from flowdata.loader.wire import Batch

__all__ = ["Batch", "DataLoader", "EpochBatches", "EpochOrder", "LaneDataset", "PassDataset", "StreamDataset"]
