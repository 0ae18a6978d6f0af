"""What a source function's return value becomes: a :class:`~flowdata.run.sources.contract.Source`.

Indexes, used as they are: :class:`IndexSource` over a sized, indexable object returned by
the source function -- a list (:class:`SequenceIndex`), an Arrow table or a pandas
DataFrame, one dict per row (:class:`TableIndex`), a ``datasets.Dataset``
(:class:`DatasetIndex`) -- or over an Arrow index
(:class:`~flowdata.run.sources.arrowindex.ArrowIndex`).

Streams: :class:`~flowdata.run.sources.sharded.ShardedSource` over an iterable in shards (a
``datasets.IterableDataset``), whose ``keyed()`` gives each item with its own sample
index; :class:`IterableSource` over anything else (a generator), which is read once --
:func:`indexed` stores its items in an Arrow index (:mod:`flowdata.run.sources.arrowindex`)
for random access.

Which return value is a Hugging Face dataset, and how its rows are read, is
:mod:`flowdata.run.sources.huggingface`'s to say.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from flowdata.columns import ArrowRows
from flowdata.errors import FlowdataError, NodeError, describe, user_traceback
from flowdata.io import mapped_path, open_mapped
from flowdata.node import Node
from flowdata.run.sources import huggingface
from flowdata.run.sources.arrowindex import ArrowIndex, write_index
from flowdata.run.sources.contract import ItemIndex, Source, guarded, numbered

__all__ = [
    "DatasetIndex",
    "IndexSource",
    "ItemIndex",
    "IterableSource",
    "SequenceIndex",
    "Source",
    "TableIndex",
    "as_source",
    "call_source",
    "guarded",
    "indexed",
]

_BATCH = 65_536
_ROWS = 1024  # rows of a map-style datasets.Dataset read at once when iterating it whole


class SequenceIndex:
    """A sized, indexable object returned by the source, used as it is."""

    def __init__(self, items: Any):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def take(self, indices: Sequence[int]) -> list[Any]:
        """The items at ``indices``."""
        items = self.items
        return [items[i] for i in indices]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)


class TableIndex:
    """A table returned by the source -- a ``pyarrow.Table`` or ``RecordBatch``, a pandas
    ``DataFrame`` -- as the index: one dict per row (``table[i]`` would be a column).

    An Arrow table is read by record batch: a run of consecutive rows is one zero-copy
    slice, other rows are taken from each batch they fall in (``Table.take`` on a table of
    many chunks costs time in proportion to the whole table, not to the rows taken: 28 ms
    for 256 rows of a million-row Parquet table, against 0.5 ms this way).
    """

    def __init__(self, table: Any):
        self.table = table
        self._arrow = hasattr(table, "to_pylist") and hasattr(table, "take")
        self._batches: list[Any] | None = None
        self._starts: Any = None

    def __getstate__(self) -> dict[str, Any]:
        mapped = mapped_path(self.table)
        return {"mapped": mapped} if mapped is not None else {"table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "mapped" in state:  # mapped here too (the file belongs to the process that made it)
            table = open_mapped(state["mapped"])
        else:
            table = state["table"]
        self.__init__(table)  # type: ignore[misc]

    def __len__(self) -> int:
        return len(self.table)

    def take(self, indices: Sequence[int]) -> Sequence[Any]:
        """The rows at ``indices``, read at once: an Arrow table's as one record batch (or
        table) in a :class:`~flowdata.columns.ArrowRows` column, a dict per row made only
        when something reads them one by one; a DataFrame's as a list of dicts."""
        if not len(indices):
            return []
        if not self._arrow:
            return self.table.iloc[list(indices)].to_dict("records")  # type: ignore[no-any-return]
        import numpy as np
        import pyarrow as pa

        at = np.asarray(indices, dtype=np.int64)
        first = int(at[0])
        if int(at[-1]) - first == len(at) - 1 and (len(at) == 1 or bool((np.diff(at) == 1).all())):
            return ArrowRows(self.table.slice(first, len(at)))
        batches, starts = self._by_batch()
        if len(batches) == 1:
            return ArrowRows(batches[0].take(at))
        which = np.searchsorted(starts, at, side="right") - 1
        parts, order = [], []
        for b in np.unique(which).tolist():
            where = np.flatnonzero(which == b)
            parts.append(batches[b].take(at[where] - starts[b]))
            order.append(where)
        # the rows of each batch, then put back in the order asked for
        joined = pa.concat_batches(parts)
        return ArrowRows(joined.take(np.argsort(np.concatenate(order), kind="stable")))

    def _by_batch(self) -> tuple[list[Any], Any]:
        if self._batches is None:
            import numpy as np

            batches = self.table.to_batches() if hasattr(self.table, "to_batches") else [self.table]
            self._batches = [b for b in batches if len(b)] or batches[:1]
            self._starts = np.cumsum([0] + [len(b) for b in self._batches[:-1]])
        return self._batches, self._starts

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self.table), _BATCH):
            yield from self.take(range(start, min(start + _BATCH, len(self.table))))


class DatasetIndex:
    """A map-style ``datasets.Dataset`` as the index, as it is: rows are read by batches of
    indices through Arrow (one ``dataset[indices]`` call per batch), never copied into
    another index; its fingerprint is the dataset's own plus the size and modification time
    of the files its string columns name."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def take(self, indices: Sequence[int]) -> list[Any]:
        """The rows at ``indices``, read in one Arrow call."""
        if not indices:
            return []
        return huggingface.rows(self.dataset, indices)

    def __iter__(self) -> Iterator[Any]:
        n = len(self.dataset)
        for start in range(0, n, _ROWS):
            yield from self.take(range(start, min(start + _ROWS, n)))

    def fingerprint(self) -> tuple[str, int]:
        """(digest, count): the dataset's own fingerprint, and the files its string columns name."""
        import hashlib

        from flowdata.run.caching.fingerprint import file_stats

        h = hashlib.sha256(f"datasets:{huggingface.fingerprint_of(self.dataset)}:{len(self.dataset)}".encode())
        for column, value in huggingface.named_strings(self.dataset):
            for _, size, mtime in file_stats(value):
                h.update(f"|{column}:{size}:{mtime}".encode())
        return h.hexdigest(), len(self.dataset)


def _is_table(value: Any) -> bool:
    t = type(value)
    if t.__module__.startswith("pyarrow") and t.__name__ in ("Table", "RecordBatch"):
        return True
    return t.__module__.startswith("pandas") and t.__name__ == "DataFrame"


class IndexSource:
    """A source with random access to its items."""

    def __init__(self, node: Node, items: ItemIndex):
        self.node = node
        self.items = items

    def open(self) -> Iterator[Any]:
        """The items in order."""
        return guarded(self.items, self.node)

    def index(self) -> ItemIndex:
        """The items, by position."""
        return self.items

    def fingerprint(self) -> tuple[str, int]:
        """(digest, count) of the items (the index's own, when it has one)."""
        from flowdata.run.caching.passcache import fingerprint_items

        own = getattr(self.items, "fingerprint", None)
        return own() if own is not None else fingerprint_items(self.open())

    def keyed(self) -> Iterator[tuple[int, Any]]:
        """``(index, item)`` in order."""
        return numbered(self.open())

    def shards(self) -> None:
        """Not a stream in shards."""
        return None


class IterableSource:
    """A source whose items can only be iterated: read once, in order."""

    def __init__(self, node: Node, items: Iterable[Any]):
        self.node = node
        self._items: Iterable[Any] | None = items

    def open(self) -> Iterator[Any]:
        """The items in order (once: a second open is an error)."""
        items, self._items = self._items, None
        if items is None:
            raise FlowdataError(f"source '{self.node.name}' was already read: it is an iterator")
        return guarded(items, self.node)

    @property
    def unread(self) -> Iterable[Any] | None:
        """What the source function returned, until :meth:`open` reads it (then None)."""
        return self._items

    def index(self) -> None:
        """No random access."""
        return None

    def fingerprint(self) -> tuple[str, int]:
        """(digest, count) of the items (reads them)."""
        from flowdata.run.caching.passcache import fingerprint_items

        return fingerprint_items(self.open())

    def keyed(self) -> Iterator[tuple[int, Any]]:
        """``(index, item)`` in order (reads the items: once)."""
        return numbered(self.open())

    def shards(self) -> None:
        """Not a stream in shards."""
        return None


def call_source(node: Node, kwargs: dict[str, Any]) -> Source:
    """Calls a source function; what it returns, as a source. Its error is the source's ``NodeError``."""
    try:
        value = node.fn(**kwargs)
    except Exception as exc:
        raise NodeError(node.name, node.location, describe(exc)) from exc.with_traceback(
            user_traceback(exc.__traceback__)
        )
    return as_source(node, value)


def as_source(node: Node, value: Any) -> Source:
    """The source adapter for what ``node``'s function returned: a ``datasets.Dataset``
    (:class:`DatasetIndex`) or another sized, indexable object is the index; an iterable in
    shards is a :class:`~flowdata.run.sources.sharded.ShardedSource`; any other iterable is
    read once, in order."""
    from flowdata.run.sources.sharded import ShardedSource, is_sharded

    if huggingface.is_dataset(value):
        return IndexSource(node, DatasetIndex(value))
    if _is_table(value):
        return IndexSource(node, TableIndex(value))
    if hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, (str, bytes, dict)):
        return IndexSource(node, SequenceIndex(value))
    if is_sharded(value):
        return ShardedSource(node, value)
    if not isinstance(value, Iterable):
        raise NodeError(
            node.name,
            node.location,
            f"a source must return an iterable of samples, got {type(value).__name__}; "
            "fix: 'yield' the items or return a list",
        )
    return IterableSource(node, value)


def indexed(source: Source, directory: str | None) -> IndexSource:
    """A source with random access: as it is, or its items stored in an Arrow index."""
    if isinstance(source, IndexSource):
        return source
    stored = write_index(source.open(), directory, source.node.name)
    return IndexSource(source.node, stored if isinstance(stored, ArrowIndex) else SequenceIndex(stored))
