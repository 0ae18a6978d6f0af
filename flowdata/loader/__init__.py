"""The training iterator: a group's per-sample work inside torch DataLoader workers.

Modules, each one concept: ``order`` (which samples form each batch), ``wire`` (what a
worker sends back), ``datasets`` (the torch datasets running the engine's kernel),
``dataloader`` (``flowdata.DataLoader``), ``build`` (statistics pass, index, dataset).
"""

from flowdata.loader.dataloader import DataLoader
from flowdata.loader.datasets import PassDataset, StreamDataset
from flowdata.loader.order import EpochBatches
from flowdata.loader.wire import Batch

__all__ = ["Batch", "DataLoader", "EpochBatches", "PassDataset", "StreamDataset"]
