"""Sources in shards, and Hugging Face datasets as sources.

- :class:`ShardedSource`: what a source returns that is split in shards -- a
  ``datasets.IterableDataset``, or any iterable with an ``int`` attribute ``num_shards``
  and a method ``shard(num_shards, index)`` that gives shard ``index`` as an iterable.
  Every shard is read on its own, in order, so a consumer reads only the shards it
  serves (see :mod:`flowdata.loader.lanes`). A sample's index is
  ``shard * SHARD_STRIDE + row`` (its row within its shard), so any process that reads
  a shard knows its samples' indices without reading the shards before it; indices are
  then not consecutive from one shard to the next, which the engine's chunking and
  folding take as gaps (blocks never span two shards).
- :class:`DatasetIndex`: a map-style ``datasets.Dataset`` as the random-access index, as
  it is: rows are read by batches of indices through Arrow (one ``dataset[indices]``
  call per batch), never copied into another index; its fingerprint is the dataset's
  own ``_fingerprint`` plus the size and modification time of the files its string
  columns name.

Hugging Face's ``IterableDataset`` keeps only "its" shards when iterated inside a torch
DataLoader worker; a shard read here (and any source iterated by
:func:`~flowdata.run.sources.contract.guarded`) is read with the worker hidden, so nothing is
split twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from flowdata.errors import FlowdataError, NodeError, describe, user_traceback
from flowdata.node import Node
from flowdata.run.sources.contract import guarded

__all__ = ["SHARD_STRIDE", "DatasetIndex", "ShardedSource", "is_hf_dataset", "is_sharded", "shard_of"]

SHARD_STRIDE = 1 << 32
"""Sample indices of shard ``s`` are ``s * SHARD_STRIDE + row``."""

_ROWS = 1024  # rows of a map-style dataset read at once when iterating it whole


def is_sharded(value: Any) -> bool:
    """Whether ``value`` is an iterable split in shards (``num_shards`` and ``shard()``)."""
    if hasattr(value, "__getitem__") and hasattr(value, "__len__"):
        return False  # a sized, indexable object is an index (a datasets.Dataset has shard() too)
    try:
        n = getattr(value, "num_shards", None)
        if getattr(value, "_distributed", None) is not None:
            # Split by node already (datasets.distributed.split_dataset_by_node): read as
            # the library gives it, in order, so that its own split applies once.
            return False
        if _order_dependent(value):
            return False
    except Exception:
        return False
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1 and callable(getattr(value, "shard", None))


# Steps of a datasets.IterableDataset whose result depends on the order across shards:
# take(n)/skip(n) count rows of the whole stream, interleave_datasets() stops or cycles
# over all its sources. Read shard by shard they would keep other rows (datasets divides
# take(n) between the shards), so such a stream is read whole, in order.
_ACROSS_SHARDS = frozenset({
    "TakeExamplesIterable", "SkipExamplesIterable", "CyclingMultiSourcesExamplesIterable",
    "RandomlyCyclingMultiSourcesExamplesIterable", "HorizontallyConcatenatedMultiSourcesExamplesIterable",
})


def _order_dependent(value: Any) -> bool:
    """Whether a ``datasets.IterableDataset`` has a step of :data:`_ACROSS_SHARDS`."""
    todo = [getattr(value, "_ex_iterable", None)]
    seen = 0
    while todo and seen < 1000:
        step = todo.pop()
        seen += 1
        if step is None:
            continue
        if type(step).__name__ in _ACROSS_SHARDS:
            return True
        todo.append(getattr(step, "ex_iterable", None))
        todo.extend(getattr(step, "ex_iterables", None) or ())
    return False


def is_hf_dataset(value: Any) -> bool:
    """Whether ``value`` is a map-style ``datasets.Dataset`` (without importing ``datasets``)."""
    t = type(value)
    return t.__name__ == "Dataset" and t.__module__.startswith("datasets.") and hasattr(value, "_fingerprint")


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
            try:
                part = self.data.shard(num_shards=self.num_shards, index=shard)
            except TypeError:  # a shard(num_shards, index) of another library, positional
                part = self.data.shard(self.num_shards, shard)
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

    def shard(self, rank: int, world_size: int) -> Iterator[tuple[int, Any]]:
        """The samples of shards ``rank, rank + world_size, ...``."""
        for s in range(rank, self.num_shards, world_size):
            yield from self.rows(s)


class DatasetIndex:
    """A map-style ``datasets.Dataset`` as the index (see the module docstring)."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def take(self, indices: Sequence[int]) -> list[Any]:
        """The rows at ``indices``, read in one Arrow call."""
        if not indices:
            return []
        rows = _rows_of(self.dataset[list(indices)], len(indices))
        # A format that gives no dict of columns (pandas, arrow): rows as dataset[i] gives them.
        return rows if rows is not None else [self.dataset[int(i)] for i in indices]

    def __iter__(self) -> Iterator[Any]:
        n = len(self.dataset)
        for start in range(0, n, _ROWS):
            yield from self.take(range(start, min(start + _ROWS, n)))

    def fingerprint(self) -> tuple[str, int]:
        """(digest, count): the dataset's ``_fingerprint``, and the files its string columns name."""
        import hashlib

        from flowdata.run.caching.fingerprint import file_stats

        h = hashlib.sha256(f"datasets:{self.dataset._fingerprint}:{len(self.dataset)}".encode())
        table = self.dataset.data
        import pyarrow as pa

        for field in table.schema:
            for chunk in table.column(field.name).chunks:
                for value in _strings_of(chunk, pa):
                    for _, size, mtime in file_stats(value):
                        h.update(f"|{field.name}:{size}:{mtime}".encode())
        return h.hexdigest(), len(self.dataset)


def _strings_of(array: Any, pa: Any) -> Iterator[str]:
    """The strings of an Arrow array, nested ones included (the ``path`` of an undecoded
    ``Image``/``Audio`` struct, lists of paths), without reading its binary columns."""
    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        yield from (v for v in array.to_pylist() if v is not None)
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _strings_of(array.field(i), pa)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _strings_of(array.flatten(), pa)


def _rows_of(batch: Any, n: int) -> list[Any] | None:
    """One row dict per sample of a dict of columns (what ``dataset[indices]`` gives), or
    None when the batch is not one (another format)."""
    if not isinstance(batch, dict):
        return None
    names = list(batch)
    columns = [batch[k] for k in names]
    if any(len(c) != n for c in columns):
        return None  # a transform that changes the number of rows: read row by row
    return [dict(zip(names, values)) for values in zip(*columns)] if names else [{} for _ in range(n)]
