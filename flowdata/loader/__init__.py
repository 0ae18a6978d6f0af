"""The training iterator: a group's per-sample work inside torch DataLoader workers.

Modules, each one concept: ``order`` (which samples form each batch: the frozen
:class:`EpochOrder`, the map-style sampler, the stream's cut), ``lanes`` (which consumer
reads which shards of a stream in shards), ``position`` (the contract below), ``wire``
(what a worker sends back), ``datasets`` (the torch datasets running the engine's kernel),
``evening`` (a stream in shards evened out between ranks), ``dataloader``
(``flowdata.DataLoader``), ``build`` (statistics pass, index, dataset: the one place that
picks a dataset kind).

Every kind of dataset owns its epoch's position -- the map-style loader's
:class:`EpochBatches` sampler, :class:`StreamDataset`, :class:`LaneDataset` -- through one
contract (:class:`~flowdata.loader.position.Position`), which ``DataLoader.state_dict()``
and ``load_state_dict()`` compose without knowing the kind:

- ``order`` (an :class:`EpochOrder`: seed, epoch, shuffle, shuffle buffer, batch size,
  ``drop_last``, even batches, rank, world size), ``served``, ``ended``, ``remainder``;
- ``start_epoch(epoch)``, ``delivered(batch)``, ``end_epoch()``;
- ``state()`` (plain, JSON-able values) and ``restore(state)`` (checked first; a refused
  state changes nothing).
"""

from flowdata.loader.dataloader import DataLoader
from flowdata.loader.datasets import PassDataset, StreamDataset
from flowdata.loader.lanes import LaneDataset
from flowdata.loader.order import EpochBatches, EpochOrder
from flowdata.loader.wire import Batch

__all__ = ["Batch", "DataLoader", "EpochBatches", "EpochOrder", "LaneDataset", "PassDataset", "StreamDataset"]
