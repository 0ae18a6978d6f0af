"""Sources in shards.

:class:`ShardedSource`: what a source returns that is split in shards -- a
``datasets.IterableDataset``, or any iterable with an ``int`` attribute ``num_shards`` and
a method ``shard(num_shards, index)`` that gives shard ``index`` as an iterable. Every
shard is read on its own, in order, so a consumer reads only the shards it serves (see
:mod:`flowdata.loader.lanes`). A sample's index is ``shard * SHARD_STRIDE + row`` (its row
within its shard), so any process that reads a shard knows its samples' indices without
reading the shards before it; indices are then not consecutive from one shard to the
next, which the engine's chunking and folding take as gaps (blocks never span two shards).

A ``datasets.IterableDataset`` that must be read whole, in order (already split by node,
or with a step that reads across shards), is not taken in shards
(:mod:`flowdata.run.sources.huggingface` knows which). Hugging Face's ``IterableDataset``
keeps only "its" shards when iterated inside a torch DataLoader worker; a shard read here
(and any source iterated by :func:`~flowdata.run.sources.contract.guarded`) is read with
the worker hidden, so nothing is split twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flowdata.errors import FlowdataError, NodeError, describe, user_traceback
from flowdata.node import Node
from flowdata.run.sources import huggingface
from flowdata.run.sources.contract import Shards, guarded

__all__ = ["SHARD_STRIDE", "ShardedSource", "is_sharded", "shard_of"]

SHARD_STRIDE = 1 << 32
"""Sample indices of shard ``s`` are ``s * SHARD_STRIDE + row``."""


def is_sharded(value: Any) -> bool:
    """Whether ``value`` is an iterable split in shards (``num_shards`` and ``shard()``)."""
    if hasattr(value, "__getitem__") and hasattr(value, "__len__"):
        return False  # a sized, indexable object is an index (a datasets.Dataset has shard() too)
    try:
        n = getattr(value, "num_shards", None)
        if huggingface.split_by_node(value) or huggingface.reads_across_shards(value):
            return False  # read whole, in order
    except Exception:
        return False
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1 and callable(getattr(value, "shard", None))


def shard_of(index: int) -> tuple[int, int]:
    """``(shard, row)`` of a sample index of a sharded source."""
    return divmod(index, SHARD_STRIDE)


class ShardedSource:
    """A source split in shards (see the module docstring).

    Args:
        node: The source function's node.
        data: What it returned.
    """

    def __init__(self, node: Node, data: Any):
        self.node = node
        self.data = data
        self.num_shards = int(data.num_shards)

    def rows(self, shard: int, step: int = 1, offset: int = 0) -> Iterator[tuple[int, Any]]:
        """``(index, row)`` of every ``step``-th row of ``shard`` from row ``offset`` on, in
        order; a failure names the source function and the sample."""
        start = shard * SHARD_STRIDE
        try:
            part = huggingface.shard(self.data, self.num_shards, shard)
        except Exception as exc:
            raise NodeError(
                self.node.name, self.node.location, f"{describe(exc)} (while opening shard {shard} of "
                f"{self.num_shards}, sample {start} on)"
            ) from exc.with_traceback(user_traceback(exc.__traceback__))
        for row, item in enumerate(guarded(part, self.node, start, f": row {{}} of shard {shard}")):
            if row >= SHARD_STRIDE:
                raise FlowdataError(
                    f"source '{self.node.name}': shard {shard} has more than {SHARD_STRIDE} rows\n"
                    "  fix: split the data into more shards"
                )
            if row % step == offset:
                yield start + row, item

    def keyed(self) -> Iterator[tuple[int, Any]]:
        """``(index, item)`` of every sample, shard after shard."""
        for s in range(self.num_shards):
            yield from self.rows(s)

    def open(self) -> Iterator[Any]:
        """The items, shard after shard."""
        return (item for _, item in self.keyed())

    def index(self) -> None:
        """No random access."""
        return None

    def fingerprint(self) -> tuple[str, int]:
        """(digest, count) of the items (reads them once)."""
        from flowdata.run.caching.passcache import fingerprint_items

        return fingerprint_items(self.open())

    def shards(self) -> Shards:
        """The stream and its number of shards, for workers that read shards themselves."""
        return Shards(self.data, self.num_shards)
