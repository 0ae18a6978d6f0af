"""The Arrow index: a source's items stored once in an Arrow IPC file, memory-mapped.

A source that can only be iterated (a generator) gives the training iterator random
access through :func:`write_index`: its items are read once, in order, and written to an
Arrow IPC file of one column, ``item``, that every worker memory-maps
(:class:`ArrowIndex`), so a worker's private memory does not grow as it walks the items (a
Python list's reference counts are written on every read: copy-on-read after fork).

Where the file goes: under a ``cache_dir`` (it stays, named by its contents, so that
loaders over the same items share one file), else in a scratch folder (removed with the
index), else -- no folder took it -- in memory, said by a warning. Nothing partial is
left behind, and a writer killed mid-way leaves a temporary file that the next build
under that ``cache_dir`` removes (:func:`_sweep`).

Arrow items may be strings, bytes, numbers, booleans, None, dicts of those (a struct
column), lists, or tuples (stored as a struct and read back as tuples). Anything else is
an error that says what to yield instead.
"""

from __future__ import annotations

import os
import re
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from flowdata.errors import FlowdataError, short_repr
from flowdata.run import scratch, writers

__all__ = ["ArrowIndex", "write_index"]

_BATCH = 65_536  # items per record batch, and per slice read when iterating


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


def write_index(items: Iterable[Any], directory: str | None, name: str) -> ArrowIndex | list[Any]:
    """An index of ``items``: an Arrow file under ``directory`` (a ``cache_dir``: the file
    stays), else in a scratch folder (removed with the index), else in memory (the items
    in a list).

    A scratch folder (see :mod:`flowdata.run.scratch`) is removed when the index is
    collected, at exit, on SIGTERM, when writing it fails, and -- after a kill -- by the
    next run. A place that cannot take the file (read-only, a full disk, a file in the
    way) loses nothing: the part written is read back from the file, which is removed,
    and the write goes on at the next place -- the source is read once. A ``cache_dir``
    that cannot be written gives its one warning (:func:`flowdata.run.caching.passcache.unwritable`); an
    index kept in memory (no folder took it) gives one naming the temporary folder.
    """
    from flowdata.run.caching.passcache import say, unwritable

    made = _Batches(iter(items), name)
    batches: Iterator[Any] = iter(made)
    if directory is not None:
        _sweep(directory)
        try:
            return _write_arrow(batches, directory, made)
        except _Unwritten as failed:
            say([unwritable(directory, failed.error)])
            batches = failed.rest
    folder: str | None = None
    try:
        folder = scratch.make("index")
        index = _write_arrow(batches, folder, made)
    except (_Unwritten, OSError) as failed:
        if folder is not None:
            scratch.remove(folder)
        error = failed.error if isinstance(failed, _Unwritten) else failed
        if isinstance(failed, _Unwritten):
            batches = failed.rest
        import logging

        logging.getLogger("flowdata").warning(
            "the index of source '%s' is kept in memory: no folder could take it (the temporary folder %s: %s: "
            "%s); DataLoader workers copy what they read of it", name, folder or "", type(error).__name__, error)
        rows = [row for batch in batches for row in batch.column(0).to_pylist()]
        return [tuple(v.values()) for v in rows] if made.as_tuple else rows
    except BaseException:
        if folder is not None:
            scratch.remove(folder)
        raise
    # A temporary index lives as long as the index object in this process (workers,
    # which hold copies, stop before the loader that owns it is collected).
    weakref.finalize(index, scratch.remove, folder)
    return index


class _Batches:
    """The items as Arrow record batches of one column, ``item`` (one type throughout)."""

    def __init__(self, items: Iterator[Any], name: str):
        self.items = items
        self.name = name
        self.as_tuple = False
        self.length = 0
        self.type: Any = None

    def __iter__(self) -> Iterator[Any]:
        import pyarrow as pa

        while True:
            batch = list(islice(self.items, _BATCH))
            if not batch:
                return
            if self.type is None:
                self.as_tuple = isinstance(batch[0], tuple)
            if self.as_tuple:
                batch = [_tuple_row(x, self.name, self.length + i) for i, x in enumerate(batch)]
            try:
                array = pa.array(batch) if self.type is None else pa.array(batch, type=self.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                raise FlowdataError(
                    f"source '{self.name}' yields items an Arrow index cannot hold "
                    f"(first item: {short_repr(batch[0])}): {exc}\n"
                    "  fix: yield light descriptions of samples — a path string, or a dict of "
                    "str/int/float (e.g. {'path': 'a.wav', 'label': 3}) — and load data in a "
                    "per-sample node, or return a list from the source to use it as the index"
                ) from exc
            self.type = array.type
            self.length += len(batch)
            yield pa.record_batch([array], names=["item"])


class _Unwritten(Exception):
    """A folder could not take an index: the error, and every batch still to write (those
    the removed file held first)."""

    def __init__(self, error: OSError, rest: Iterator[Any]):
        super().__init__(error)
        self.error, self.rest = error, rest


def _write_arrow(batches: Iterator[Any], folder: str, made: _Batches) -> ArrowIndex:
    """Writes ``batches`` to a new Arrow file in ``folder``. Raises :class:`_Unwritten` when
    the folder cannot take it; nothing partial is left either way."""
    import pyarrow as pa

    path: str | None = None
    writer: Any = None
    done = 0
    batch: Any = None
    try:
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{made.name}-{writers.tag()}-", suffix=".arrow.tmp", dir=folder)
            path = tmp  # removed on failure while set
            os.close(fd)
        except OSError as exc:
            raise _Unwritten(exc, batches) from exc
        while True:
            batch = next(batches, None)  # a failing source raises here, as it is
            try:
                if batch is None:
                    if writer is None:
                        writer = pa.ipc.new_file(tmp, pa.schema([pa.field("item", pa.null())]))
                    writer, closing = None, writer
                    closing.close()  # writes the footer: may fail too
                    path = None
                    return ArrowIndex(_into_place(tmp, folder, made.name), made.length, made.as_tuple)
                if writer is None:
                    writer = pa.ipc.new_file(tmp, batch.schema)
                writer.write_batch(batch)
            except OSError as exc:
                raise _Unwritten(exc, _read_back(tmp, done, batch, batches)) from exc
            done += 1
    except BaseException:
        if writer is not None:
            try:
                writer.close()
            except Exception:
                pass  # the write failed already: the file goes
        if path is not None:
            try:
                os.remove(path)  # nothing partial is left behind
            except OSError:
                pass
        raise


def _into_place(written: str, folder: str, name: str) -> str:
    """The written index file ``written`` renamed to ``<name>-<digest>.arrow`` (its
    contents' SHA-256): a file already there with those contents (another loader's over
    the same items) is used instead, and ``written`` removed, so that loaders over the
    same items share one file. Returns the path the index is read from (``written``
    itself when the renaming fails: a whole index all the same). Something not a file
    under that name (a FIFO, a socket, a device, a folder) is left alone and said once:
    the index is read from ``written``, removed like any temporary index once this
    process is gone."""
    from flowdata.io import NotAFile

    try:
        digest = _file_digest(written)
        path = os.path.join(folder, f"{name}-{digest[:16]}.arrow")
        try:
            same = _file_digest(path) == digest
        except NotAFile as exc:
            from flowdata.run.caching.passcache import say

            say([("flowdata.cache", f"foreign:{path}",
                  f"{exc}, where the index of source '{name}' goes: it is left alone, and the index is read "
                  f"from {written} (fix: remove it, or give cache_dir a folder that only flowdata writes to)")])
            return written
        except OSError:
            same = False  # not there (or unreadable: replaced)
        if same:
            os.remove(written)
        else:
            os.replace(written, path)  # atomic: a reader sees either file, whole
        return path
    except OSError:
        return written
    except BaseException:
        try:
            os.remove(written)
        except OSError:
            pass
        raise


def _file_digest(path: str) -> str:
    import hashlib

    from flowdata.io import open_regular

    h = hashlib.sha256()
    with open_regular(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_TEMPORARY = re.compile(r"^\.[A-Za-z_][A-Za-z0-9_]*-(\d+)~([A-Za-z0-9._-]+)-[A-Za-z0-9_]+\.arrow\.tmp$")
"""An index being written: ``.<source>-<pid>~<host>-<random>.arrow.tmp``."""


def _sweep(directory: str) -> None:
    """Removes the index files being written in ``directory`` (a ``cache_dir``) whose writer
    is gone (killed while writing: :func:`flowdata.run.writers.gone`); a warning says how
    many and how many bytes."""
    from flowdata.run.caching.passcache import say

    files = size = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        found = _TEMPORARY.match(name)
        path = os.path.join(directory, name)
        if found is None or not writers.gone(path, int(found[1]), found[2]):
            continue
        try:
            took = os.stat(path).st_size
            os.remove(path)
        except OSError:
            continue  # removed by another process meanwhile, or read-only: left
        files, size = files + 1, size + took
    if files:
        say([("flowdata.cache", f"swept-index:{os.path.abspath(directory)}",
              f"cache_dir {directory}: removed {files} temporary index file{'s' if files != 1 else ''} "
              f"({size:,} bytes) left by writers that were killed while writing")])


def _read_back(path: str, done: int, failed: Any, rest: Iterator[Any]) -> Iterator[Any]:
    """The ``done`` batches a partly written Arrow file holds (mapped before the caller
    removes the file), then ``failed`` (the batch being written), then ``rest``."""
    import pyarrow as pa

    reader = None
    if done:
        # An IPC file is 8 bytes of magic, then the stream format: its first messages are
        # whole (each write returned), whatever the last one holds.
        reader = pa.ipc.open_stream(pa.memory_map(path, "r").read_buffer().slice(8))

    def batches() -> Iterator[Any]:
        for _ in range(done):
            yield reader.read_next_batch()  # type: ignore[union-attr]
        if failed is not None:
            yield failed
        yield from rest

    return batches()


def _tuple_row(value: Any, name: str, index: int) -> dict[str, Any]:
    if not isinstance(value, tuple):
        raise FlowdataError(
            f"source '{name}' yielded a tuple first but {short_repr(value)} at item {index}\n"
            "  fix: yield items of one kind"
        )
    return {f"f{i}": v for i, v in enumerate(value)}
