"""The sample cache on disk: per-sample values as raw arrays in checksummed segment files.

A cached node's values live in a folder of their own (named after the node and the digest
of everything its values depend on, :mod:`flowdata.run.caching.samplecache`), as **segments**
(:mod:`flowdata.run.caching.segments`): files that one writer (one process) fills and
renames into place in one step, never changed afterwards, that readers memory-map. A
chunk's small values of one node are one column record (:mod:`flowdata.run.caching.records`),
larger ones one record each. Each process reads a segment's index once, into one lookup
of every key of the folder: a hit is a lookup and a slice.

A segment whose index does not check out (truncated, overwritten, foreign, of another
format), or holds a record whose bytes do not match its checksum, is left out whole and
removed: logged once with its path, its samples are computed again and written anew. Something that is not a file where a segment should
be (a FIFO, a socket, a device, a folder named ``*.seg``) is never opened for reading (a
FIFO would wait for a writer): it is ignored, left alone and logged once, and its
samples are computed (:mod:`flowdata.io`).

A folder that cannot be written (read-only, a full disk, a file in the way) leaves nothing
behind (a segment is written to a temporary name and renamed into place, or removed) and
gives one warning naming the ``cache_dir``; the values go on being computed, counted as
``not_cached``, and what the folder holds is still read. Both warnings are *notes*
(:data:`flowdata.run.caching.passcache.Note`) that travel with the chunk's result to the process driving
the run, which logs each once (:func:`take_notes`): several workers meeting one damaged
segment or one full disk give one warning, in the main process.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import uuid
from collections.abc import Sequence
from typing import Any

from flowdata.run import writers
from flowdata.run.caching.records import ColumnRecord, Packed, gather
from flowdata.run.caching.segments import COLUMN, MISS, VALUE, Segment, parse, segment_parts

__all__ = ["MISS", "Entry", "SampleStore", "disk_use", "key_bytes", "sweep", "take_notes"]




_SIZES: dict[str, int] = {}  # segment path -> size (segments never change once in place)
_NOTES: list[tuple[str, str, str]] = []  # this process's notes not yet sent (see the module docstring)


def take_notes() -> list[tuple[str, str, str]]:
    """The warnings this process's stores made since the last call (to be said once, where
    the run is driven: :func:`flowdata.run.caching.passcache.say`)."""
    if not _NOTES:
        return []
    notes = _NOTES[:]
    del _NOTES[:]
    return notes


_TEMPORARY = re.compile(r"^\.(\d+)-[0-9a-f]{32}\.seg(?:~([A-Za-z0-9._-]+))?\.tmp$")
"""A segment being written: ``.<pid>-<uuid>.seg~<host>.tmp`` (without ``~<host>``: an
older flowdata's)."""

_SWEPT: set[str] = set()  # the samples folders this process has swept


def sweep(root: str) -> tuple[int, int]:
    """Removes the temporary segments under ``root`` (a ``cache_dir``'s ``samples`` folder)
    whose writer is gone -- killed while writing (:func:`flowdata.run.writers.gone`) --
    once per process and folder; a note says how many and how many bytes.

    Returns:
        The files removed and their bytes.
    """
    if root in _SWEPT:
        return 0, 0
    _SWEPT.add(root)
    files = size = 0
    try:
        folders = os.listdir(root)
    except OSError:
        return 0, 0
    for sub in folders:
        try:
            names = os.listdir(os.path.join(root, sub))
        except OSError:
            continue
        for name in names:
            found = _TEMPORARY.match(name)
            path = os.path.join(root, sub, name)
            if found is None or not writers.gone(path, int(found[1]), found[2]):
                continue
            try:
                took = os.stat(path).st_size
                os.remove(path)
            except OSError:
                continue  # removed by another process meanwhile, or read-only: left
            files, size = files + 1, size + took
    if files:
        _NOTES.append(("flowdata", f"swept:{os.path.abspath(root)}",
                       f"sample cache {root}: removed {files} temporary segment{'s' if files != 1 else ''} "
                       f"({size:,} bytes) left by writers that were killed while writing"))
    return files, size


def disk_use(root: str) -> int:
    """Bytes of every segment under ``root`` (the ``samples`` folder of a ``cache_dir``:
    every cached node's folder, those of older code included), and of every segment being
    written there."""
    total = 0
    try:
        folders = os.listdir(root)
    except OSError:
        return 0
    for sub in folders:
        try:
            names = os.listdir(os.path.join(root, sub))
        except OSError:
            continue
        for name in names:
            path = os.path.join(root, sub, name)
            if _TEMPORARY.match(name):  # a segment being written counts too (it grows: not kept)
                try:
                    total += os.stat(path).st_size
                except OSError:
                    pass  # renamed into place, or removed, meanwhile
                continue
            if not name.endswith(".seg"):
                continue
            size = _SIZES.get(path)
            if size is None:
                try:
                    size = _SIZES[path] = os.stat(path).st_size
                except OSError:
                    continue
            total += size
    return total


Entry = tuple[Segment, int, int]
"""Where a key's value is: its segment, record and row."""


def key_bytes(key: bytes | str) -> bytes:
    """A key as the store holds it: a 32-byte digest as it is, anything else by its SHA-256."""
    if isinstance(key, bytes) and len(key) == 32:
        return key
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).digest()


class SampleStore:
    """The segments of one cached node's folder: lookups, and this process's writes.

    Args:
        folder: The node's folder (made when first written).
        max_bytes: Bytes the segments under the folder's parent (the ``cache_dir``'s
            ``samples`` folder) may take at most; a value past it is not written (None: no
            limit). Checked against the disk when a chunk starts, so writers running at
            once may pass it by one segment each.
    """

    def __init__(self, folder: str, max_bytes: int | None = None):
        self.folder = folder
        self.max_bytes = max_bytes
        self._used = 0
        self._index: dict[bytes, Entry] = {}
        self._seen: set[str] = set()
        self._segments: list[Segment] = []
        # Queued records: (keys, pieces, kind, bytes); flushed as one segment.
        self._pending: list[tuple[list[bytes], list[Any], int, int]] = []
        self._written = 0
        self._warned: set[str] = set()
        self._unwritable = False  # a write failed in this process: values are no longer queued

    # --- reading ----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Takes in the segments other writers renamed into place since the last look (the
        first look removes the temporary segments of writers that are gone: :func:`sweep`)."""
        sweep(os.path.dirname(self.folder))
        if self.max_bytes is not None:
            self._used = disk_use(os.path.dirname(self.folder))
        try:
            names = os.listdir(self.folder)
        except OSError:
            return  # nothing written yet
        for name in sorted(n for n in names if n.endswith(".seg") and n not in self._seen):
            self._seen.add(name)
            self._open(os.path.join(self.folder, name))

    def _open(self, path: str) -> None:
        from flowdata.io import NotAFile, open_regular

        try:
            with open_regular(path) as f:
                size = os.fstat(f.fileno()).st_size
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
            if m is None:
                raise ValueError("empty")
            seg, keys, where = parse(path, m, size)
        except NotAFile as exc:
            self._foreign(path, exc.kind)
            return
        except (OSError, ValueError) as exc:
            self._damaged(path, f"{exc}")
            return
        self._segments.append(seg)
        self._index.update(zip(keys, zip([seg] * len(keys), where[::2], where[1::2]), strict=True))

    def read(self, keys: Sequence[bytes]) -> tuple[dict[int, Any], Any, int]:
        """The values stored under ``keys`` (a chunk's, by position).

        Returns:
            The values found, by position (absent: not stored, or its record damaged);
            when every key hit a stacked column record that came as a column, the chunk's
            column data instead (the values empty); and the bytes read.
        """
        index = self._index
        groups: dict[tuple[int, int], tuple[Segment, int, list[int], list[int]]] = {}
        for p, k in enumerate(keys):
            found = index.get(k)
            if found is not None:
                seg, r, row = found
                group = groups.get((id(seg), r))
                if group is None:
                    group = groups[(id(seg), r)] = (seg, r, [], [])
                group[2].append(row)
                group[3].append(p)
        values: dict[int, Any] = {}
        parts: list[tuple[ColumnRecord, list[int], list[int]]] = []
        read = 0
        for seg, r, rows, positions in groups.values():
            if seg.dead:
                continue
            try:
                rec = seg.record(r)
                if rec is True:
                    for p in positions:
                        value = seg.value(r)
                        if value is not MISS:
                            values[p] = value
                            read += seg.records[r][1]
                    continue
                if max(rows) >= rec.n:
                    raise ValueError(f"a key names row {max(rows)} of a record of {rec.n}")
            except ValueError as exc:
                self._damaged(seg.path, f"{exc}")
                continue
            parts.append((rec, rows, positions))
            read += rec.share(rows)
        if parts:
            got, column = gather(parts, len(keys))
            if column is not None:
                return {}, column, read
            values.update(got)
        return values, None, read

    def get(self, key: bytes | str) -> Any:
        """The value stored under ``key``, or :data:`MISS` (absent, or its record damaged)."""
        values, column, _ = self.read([key_bytes(key)])
        if column is not None:
            return column[0]
        return values.get(0, MISS)

    def _damaged(self, path: str, why: str) -> None:
        """A segment that does not check out is left out whole and removed (its samples are
        computed again and written anew), and said once."""
        for seg in self._segments:
            if seg.path == path:
                seg.dead = True
        for key in [k for k, v in self._index.items() if v[0].path == path]:
            del self._index[key]
        if path not in self._warned:
            self._warned.add(path)
            _NOTES.append(("flowdata", f"damaged:{path}", f"sample cache segment {path} is damaged ({why}): "
                           "its samples are computed again and written anew"))
        try:
            os.remove(path)
        except OSError:
            pass  # gone already (another process found it too), or read-only: left out all the same

    def _foreign(self, path: str, kind: str) -> None:
        """Something not a file where a segment should be (flowdata never makes one): left
        alone -- it may be another program's, and opening a FIFO would wait for a writer --
        ignored, and said once."""
        if path not in self._warned:
            self._warned.add(path)
            _NOTES.append(("flowdata", f"foreign:{path}",
                           f"sample cache segment {path} is {kind}, not a regular file: it is ignored and left "
                           "alone, and its samples are computed and written to new segments (fix: remove it, or give "
                           "cache_dir a folder that only flowdata writes to)"))

    # --- writing ----------------------------------------------------------------------------

    def _room(self) -> int | None:
        return None if self.max_bytes is None else self.max_bytes - self._used - self._written

    def put(self, key: bytes | str, body: bytes) -> bool:
        """Queues one value record (an encoded value) for the next :meth:`flush`; False when
        it would pass ``max_bytes``, or the folder cannot be written (not cached)."""
        room = self._room()
        if self._unwritable or (room is not None and len(body) > room):
            return False
        self._pending.append(([key_bytes(key)], [body], VALUE, len(body)))
        self._written += len(body)
        return True

    def put_column(self, keys: Sequence[bytes], packed: Packed) -> tuple[int, int]:
        """Queues a column record of the values under ``keys``: as many of the first as
        ``max_bytes`` leaves room for (none when the folder cannot be written).

        Returns:
            The values queued and their bytes.
        """
        room = self._room()
        if self._unwritable:
            return 0, 0
        taken: Packed | None = packed
        if room is not None and sum(packed.sizes) > room:
            fit, total = 0, 0
            for size in packed.sizes:
                if total + size > room:
                    break
                fit, total = fit + 1, total + size
            taken = packed.first(fit)  # the same rows re-packed take no more than their sizes
        if taken is None or sum(taken.sizes) > (room if room is not None else sum(taken.sizes)):
            return 0, 0
        size = sum(taken.sizes)
        self._pending.append((list(keys[: taken.n]), taken.parts(), COLUMN, size))
        self._written += size
        return taken.n, size

    @property
    def queued(self) -> int:
        """Records queued for the next :meth:`flush`."""
        return len(self._pending)

    def drop(self, keep: int = 0) -> None:
        """Forgets the records queued after the first ``keep`` (their chunk failed: see
        :meth:`flowdata.run.caching.samplecache.ChunkCache.drop`)."""
        self._pending = self._pending[:keep]
        self._written = sum(size for _, _, _, size in self._pending)

    def flush(self) -> tuple[int, int]:
        """Writes the queued records as one segment, renamed into place in one step.

        Returns:
            The values and bytes that could not be written (0, 0 when all were): the
            folder cannot be written, which is noted once (see the module docstring);
            nothing partial is left and later values are not queued.
        """
        if not self._pending:
            return 0, 0
        pending, self._pending = self._pending, []
        written, self._written = self._written, 0
        name = f"{os.getpid()}-{uuid.uuid4().hex}.seg"
        tmp = os.path.join(self.folder, f".{name}~{writers.HOST}.tmp")  # who writes it: see sweep()
        parts = segment_parts(pending)
        try:
            os.makedirs(self.folder, exist_ok=True)
            with open(tmp, "wb") as f:
                for p in parts:
                    f.write(p)
            os.replace(tmp, os.path.join(self.folder, name))
        except OSError as exc:
            from flowdata.run.caching.passcache import unwritable

            try:
                os.remove(tmp)  # nothing partial is left
            except OSError:
                pass
            self._unwritable = True
            _NOTES.append(unwritable(os.path.dirname(os.path.dirname(self.folder)), exc))
            return sum(len(k) for k, _, _, _ in pending), written
        self._used += written
        return 0, 0

    def close(self) -> None:
        """Flushes, and lets go of the mapped segments."""
        self.flush()
        self._index.clear()
        for seg in self._segments:
            seg.close()
        self._segments.clear()
