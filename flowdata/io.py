"""Reading files the way flowdata does: for the bundled modules and for yours.

A module of nodes that reads files (a manifest, a table, a tokenizer) uses these so that
it fails the way flowdata's own readers fail, and never blocks or copies what it need not:

- :func:`open_regular`, :func:`check_regular`, :func:`kind_of` and :class:`NotAFile`: a path
  that is not a regular file is refused at once, saying what it is;
- :func:`mapped_table`: a ``pyarrow.Table`` kept in a memory-mapped Arrow file instead of
  this process's heap, which DataLoader workers map instead of unpickling a copy.

Never blocking on a file that is not one
----------------------------------------

``open()`` of a FIFO (named pipe) for reading waits until some process opens it for
writing -- forever, in a cache folder or a manifest -- and a character device such as
``/dev/zero`` never ends. Every file flowdata reads (cache entries, media, manifests,
tables, tokenizers) is first looked at with ``stat``: anything but a regular file (a FIFO,
a socket, a device, a directory) is refused at once with :class:`NotAFile`, which says
what it is. :func:`open_regular` opens with ``O_NONBLOCK`` and checks the opened file
again, so a FIFO put in place between the look and the ``open`` is refused too instead
of waited on.

:class:`NotAFile` is an ``OSError``: where flowdata already goes on past a file it cannot
read (a cache entry), it goes on past this one the same way.
"""

from __future__ import annotations

import fcntl
import os
import stat
import weakref
from collections.abc import Iterable, Iterator
from typing import IO, Any

__all__ = ["NotAFile", "check_regular", "kind_of", "mapped_path", "mapped_table", "open_mapped", "open_regular"]


def kind_of(mode: int) -> str | None:
    """What a ``st_mode`` names, in words ("a FIFO (named pipe)", ...); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"  # pragma: no cover - doors, whiteouts: other systems' kinds


class NotAFile(OSError):
    """A path that names something other than a regular file.

    Attributes:
        path: The path.
        kind: What it is, in words (see :func:`kind_of`).
    """

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path = path
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:  # travels from a worker as it is
        return (NotAFile, (self.path, self.kind))


def check_regular(path: str) -> os.stat_result:
    """``os.stat(path)``, refused with :class:`NotAFile` unless it is a regular file (links
    are followed). Other errors (``FileNotFoundError``, ``PermissionError``) are raised as
    they are."""
    st = os.stat(path)
    kind = kind_of(st.st_mode)
    if kind is not None:
        raise NotAFile(path, kind)
    return st


def open_regular(path: str, mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for reading, refused at once with :class:`NotAFile` unless
    ``path`` is a regular file (never blocks on a FIFO). ``kwargs`` go to ``open``
    (``encoding``, ``newline``)."""
    if any(c in mode for c in "wax+"):
        raise ValueError(f"open_regular() only reads, got mode {mode!r}")
    check_regular(path)  # a socket cannot be opened at all: said as what it is, not "no such device"
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:  # replaced between the look and the open
            raise NotAFile(path, kind)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


_MAPPED: dict[int, str] = {}  # id of a table made or opened here -> the Arrow file it maps

MAPPED_BATCH_BYTES = 256 << 20
"""Bytes of the record batches :func:`mapped_table` writes, at most (about): the batches
read (a Parquet row group, a CSV block) are joined up to this size, so that taking a
shuffled batch's rows touches one or a few record batches (one ``take`` each: 0.35 ms for
256 rows of a million-row table in one batch, 2 ms in sixteen), while a string column's
32-bit offsets stay far from their 2 GB limit and writing holds one such batch at a time."""


def mapped_table(batches: Iterable[Any], schema: Any, name: str = "table") -> Any:
    """A ``pyarrow.Table`` of record ``batches``, written to an Arrow IPC file in a scratch
    folder and memory-mapped from it: its rows live in the page cache, not in this
    process's heap, a forked worker shares them, and a source over it pickles as the file's
    path (a worker maps the same file instead of unpickling a copy). The file is removed
    when the table is collected (and at exit, see :mod:`flowdata.run.scratch`)."""
    import pyarrow as pa

    from flowdata.run import scratch

    folder = scratch.make("index")
    path = os.path.join(folder, f"{name}.arrow")
    try:
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for batch in _joined(batches, MAPPED_BATCH_BYTES):
                writer.write_batch(batch)
        table = _map(path)
    except BaseException:
        scratch.remove(folder)
        raise
    key = id(table)
    _MAPPED[key] = path
    weakref.finalize(table, _unmap, key, folder)
    return table


def _joined(batches: Iterable[Any], limit: int) -> Iterator[Any]:
    """Consecutive record batches joined into batches of up to about ``limit`` bytes."""
    import pyarrow as pa

    held: list[Any] = []
    size = 0
    for batch in batches:
        if held and size + batch.nbytes > limit:
            yield held[0] if len(held) == 1 else pa.concat_batches(held)
            held, size = [], 0
        held.append(batch)
        size += batch.nbytes
    if held:
        yield held[0] if len(held) == 1 else pa.concat_batches(held)


def mapped_path(table: Any) -> str | None:
    """The Arrow file a table of :func:`mapped_table` (or :func:`open_mapped`) maps; None
    for any other table."""
    return _MAPPED.get(id(table))


def open_mapped(path: str) -> Any:
    """The table of an Arrow file written by :func:`mapped_table` (in this process or the
    one that made it: the file belongs to that process, which removes it)."""
    table = _map(path)
    _MAPPED[id(table)] = path
    weakref.finalize(table, _MAPPED.pop, id(table), None)
    return table


def _map(path: str) -> Any:
    import pyarrow as pa

    return pa.ipc.open_file(pa.memory_map(path, "r")).read_all()


def _unmap(key: int, folder: str) -> None:
    from flowdata.run import scratch

    _MAPPED.pop(key, None)
    scratch.remove(folder)
