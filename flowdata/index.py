"""The index of a group's samples: items by position, never decoded arrays.

A source that returns a sized, indexable object (a list, a ``datasets.Dataset``, an Arrow
table) is used as it is (:class:`SequenceIndex`). A source generator is run once and its
items written to an Arrow IPC file (:class:`ArrowIndex`), which every worker
memory-maps: a worker's private memory does not grow as it walks the items, unlike a
Python list whose reference counts are written on every read (copy-on-read after fork).

Items may be strings, bytes, numbers, booleans, None, dicts of those (a struct column),
lists, or tuples (stored as a struct and read back as tuples). Anything else is an error
that says what to yield instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, Protocol, runtime_checkable

from flowdata.errors import FlowdataError, short_repr

__all__ = ["ArrowIndex", "ItemIndex", "SequenceIndex", "build_index"]

_BATCH = 65_536


@runtime_checkable
class ItemIndex(Protocol):
    """Random access to a group's items."""

    def __len__(self) -> int: ...

    def take(self, indices: Sequence[int]) -> list[Any]:
        """The items at ``indices``, in that order."""
        ...


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


class ArrowIndex:
    """Items in an Arrow IPC file, memory-mapped on first use in each process.

    Pickles as its path: a worker opens its own map.
    """

    def __init__(self, path: str, length: int, as_tuple: bool):
        self.path = path
        self.length = length
        self.as_tuple = as_tuple
        self._column: Any = None
        self._chunks: Any = None
        self._starts: list[int] = []
        self._views: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "length": self.length, "as_tuple": self.as_tuple}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["length"], state["as_tuple"])  # type: ignore[misc]

    def __len__(self) -> int:
        return self.length

    def _open(self) -> Any:
        import pyarrow as pa

        if self._column is None:
            source = pa.memory_map(self.path, "r")
            column = pa.ipc.open_file(source).read_all().column(0)
            starts, total = [], 0
            for c in column.chunks:
                starts.append(total)
                total += len(c)
            self._chunks, self._starts = column.chunks, starts
            # Fixed-width columns without nulls: zero-copy numpy views of the memory map.
            self._views = None
            if pa.types.is_primitive(column.type) and all(c.null_count == 0 for c in column.chunks):
                self._views = [c.to_numpy(zero_copy_only=True) for c in column.chunks]
            self._column = column
        return self._column

    def take(self, indices: Sequence[int]) -> list[Any]:
        """The items at ``indices``, read from the memory map chunk by chunk.

        ``ChunkedArray.take`` concatenates the chunks of a string column first (a copy of
        the whole column at every call), so each chunk is taken from on its own.
        """
        import bisect

        import pyarrow as pa

        self._open()
        chunks, starts, views = self._chunks, self._starts, self._views
        if len(chunks) == 1:
            values = views[0][indices].tolist() if views is not None else (
                chunks[0].take(pa.array(indices, type=pa.int64())).to_pylist())
        else:
            values = [None] * len(indices)
            by_chunk: dict[int, list[int]] = {}
            for pos, i in enumerate(indices):
                by_chunk.setdefault(bisect.bisect_right(starts, i) - 1, []).append(pos)
            for c, positions in by_chunk.items():
                local = [indices[p] - starts[c] for p in positions]
                got = views[c][local].tolist() if views is not None else (
                    chunks[c].take(pa.array(local, type=pa.int64())).to_pylist())
                for p, v in zip(positions, got):
                    values[p] = v
        if self.as_tuple:
            return [tuple(v.values()) for v in values]
        return values  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Any]:
        column = self._open()
        for start in range(0, self.length, _BATCH):
            values = column.slice(start, _BATCH).to_pylist()
            yield from ((tuple(v.values()) for v in values) if self.as_tuple else values)


def build_index(items: Any, directory: str | None, name: str) -> SequenceIndex | ArrowIndex:
    """The index of a source's return value.

    Args:
        items: What the source returned.
        directory: Where to write the Arrow file (a temporary folder when None).
        name: The source's name, for the file name and messages.
    """
    if hasattr(items, "__len__") and hasattr(items, "__getitem__") and not isinstance(items, (str, bytes, dict)):
        return SequenceIndex(items)
    index = _write_arrow(iter(items), directory, name)
    if directory is None:
        # A temporary index lives as long as the index object in this process (workers,
        # which hold copies, stop before the loader that owns it is collected).
        weakref.finalize(index, shutil.rmtree, os.path.dirname(index.path), True)
    return index


def _write_arrow(items: Iterable[Any], directory: str | None, name: str) -> ArrowIndex:
    import pyarrow as pa

    folder = directory or tempfile.mkdtemp(prefix="flowdata-index-")
    os.makedirs(folder, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".arrow", dir=folder)
    os.close(fd)
    it = iter(items)
    writer = None
    schema = None
    length = 0
    as_tuple = False
    try:
        while True:
            batch = list(islice(it, _BATCH))
            if not batch:
                break
            if writer is None:
                as_tuple = isinstance(batch[0], tuple)
            if as_tuple:
                batch = [_tuple_row(x, name, length + i) for i, x in enumerate(batch)]
            try:
                array = pa.array(batch) if schema is None else pa.array(batch, type=schema.field(0).type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                raise FlowdataError(
                    f"source '{name}' yields items an Arrow index cannot hold "
                    f"(first item: {short_repr(batch[0])}): {exc}\n"
                    "  fix: yield light descriptions of samples — a path string, or a dict of "
                    "str/int/float (e.g. {'path': 'a.wav', 'label': 3}) — and load data in a "
                    "per-sample node, or return a list from the source to use it as the index"
                ) from exc
            if writer is None:
                schema = pa.schema([pa.field("item", array.type)])
                writer = pa.ipc.new_file(path, schema)
            writer.write_batch(pa.record_batch([array], names=["item"]))
            length += len(batch)
        if writer is None:
            writer = pa.ipc.new_file(path, pa.schema([pa.field("item", pa.null())]))
    finally:
        if writer is not None:
            writer.close()
    return ArrowIndex(path, length, as_tuple)


def _tuple_row(value: Any, name: str, index: int) -> dict[str, Any]:
    if not isinstance(value, tuple):
        raise FlowdataError(
            f"source '{name}' yielded a tuple first but {short_repr(value)} at item {index}\n"
            "  fix: yield items of one kind"
        )
    return {f"f{i}": v for i, v in enumerate(value)}
