"""The sample cache on disk: per-sample values as raw arrays in checksummed segment files.

A cached node's values live in a folder of their own (named after the node and the digest
of everything its values depend on, :mod:`flowdata.run.caching.samplecache`), as **segments**:
files that one writer (one process) fills and renames into place in one step, never
changed afterwards, that readers memory-map::

    b"FDSAMPLE1\\n"                         magic
    record, record, ...                    each: u32 header length, JSON header, raw buffers
    index (JSON: [[key, offset, length, crc32], ...])
    u64 index length, u32 crc32 of the index, b"FDSEGEND\\n"

A record holds one value, encoded by :mod:`flowdata.run.caching.codec` (nothing is ever
unpickled); it is decoded after its CRC-32 matches. A segment whose index does
not check out (truncated, overwritten, foreign), or holds a record whose bytes do not
match its checksum, is left out whole and removed: logged once with its path, its samples
are computed again and written anew. Something that is not a file where a segment should
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

import json
import mmap
import os
import re
import struct
import uuid
import zlib
from typing import Any

from flowdata.run import writers
from flowdata.run.caching.codec import NotImported, decode_value

__all__ = ["MISS", "SampleStore", "disk_use", "sweep", "take_notes"]


_MAGIC, _END = b"FDSAMPLE1\n", b"FDSEGEND\n"
_FOOTER = struct.Struct("<QI")
MISS: Any = object()
"""What :meth:`SampleStore.get` returns for a key it does not hold (or holds damaged)."""


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
        self._index: dict[str, tuple[str, mmap.mmap, int, int, int]] = {}
        self._seen: set[str] = set()
        self._maps: list[mmap.mmap] = []
        self._pending: list[tuple[str, bytes]] = []
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
            names = sorted(n for n in os.listdir(self.folder) if n.endswith(".seg"))
        except OSError:
            return  # nothing written yet
        for name in names:
            if name not in self._seen:
                self._seen.add(name)
                self._open(os.path.join(self.folder, name))

    def _open(self, path: str) -> None:
        from flowdata.io import NotAFile, open_regular

        try:
            with open_regular(path) as f:
                size = os.fstat(f.fileno()).st_size
                if size < len(_MAGIC) + _FOOTER.size + len(_END):
                    raise ValueError("too short")
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if m[: len(_MAGIC)] != _MAGIC or m[size - len(_END) :] != _END:
                raise ValueError("not a flowdata sample segment")
            length, crc = _FOOTER.unpack_from(m, size - len(_END) - _FOOTER.size)
            start = size - len(_END) - _FOOTER.size - length
            if start < len(_MAGIC) or zlib.crc32(m[start : start + length]) != crc:
                raise ValueError("its index does not match its checksum")
            entries = json.loads(m[start : start + length])
        except NotAFile as exc:
            self._foreign(path, exc.kind)
            return
        except (OSError, ValueError) as exc:
            self._damaged(path, f"{exc}")
            return
        self._maps.append(m)
        for key, offset, length, crc in entries:
            self._index[key] = (path, m, offset, length, crc)

    def get(self, key: str) -> Any:
        """The value stored under ``key``, or :data:`MISS` (absent, or its record damaged)."""
        found = self._index.get(key)
        if found is None:
            return MISS
        path, m, offset, length, crc = found
        body = memoryview(m)[offset : offset + length]
        try:
            if zlib.crc32(body) != crc:
                raise ValueError(f"the record of sample key {key[:12]} does not match its checksum")
            return decode_value(body)
        except NotImported:
            return MISS  # sound, but its class is not loaded here: computed instead
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            self._damaged(path, f"{exc}")
            return MISS
        finally:
            body.release()

    def record_bytes(self, key: str) -> int:
        """The size of the record stored under ``key`` (0 when absent)."""
        found = self._index.get(key)
        return found[3] if found is not None else 0

    def _damaged(self, path: str, why: str) -> None:
        """A segment that does not check out is left out whole and removed (its samples are
        computed again and written anew), and said once."""
        for key in [k for k, v in self._index.items() if v[0] == path]:
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

    def put(self, key: str, body: bytes) -> bool:
        """Queues one record (an encoded value) for the next :meth:`flush`; False when it
        would pass ``max_bytes``, or the folder cannot be written (not cached)."""
        if self._unwritable:
            return False
        if self.max_bytes is not None and self._used + self._written + len(body) > self.max_bytes:
            return False
        self._pending.append((key, body))
        self._written += len(body)
        return True

    @property
    def queued(self) -> int:
        """Records queued for the next :meth:`flush`."""
        return len(self._pending)

    def drop(self, keep: int = 0) -> None:
        """Forgets the records queued after the first ``keep`` (their chunk failed: see
        :meth:`flowdata.run.caching.samplecache.ChunkCache.drop`)."""
        self._pending = self._pending[:keep]
        self._written = sum(len(body) for _, body in self._pending)

    def flush(self) -> tuple[int, int]:
        """Writes the queued records as one segment, renamed into place in one step.

        Returns:
            The records and bytes that could not be written (0, 0 when all were): the
            folder cannot be written, which is noted once (see the module docstring);
            nothing partial is left and later values are not queued.
        """
        if not self._pending:
            return 0, 0
        pending, self._pending = self._pending, []
        written, self._written = self._written, 0
        name = f"{os.getpid()}-{uuid.uuid4().hex}.seg"
        tmp = os.path.join(self.folder, f".{name}~{writers.HOST}.tmp")  # who writes it: see sweep()
        entries = []
        at = len(_MAGIC)
        parts: list[bytes] = [_MAGIC]
        for key, body in pending:
            entries.append([key, at, len(body), zlib.crc32(body)])
            parts.append(body)
            at += len(body)
        index = json.dumps(entries, separators=(",", ":")).encode()
        parts += [index, _FOOTER.pack(len(index), zlib.crc32(index)), _END]
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
            return len(pending), written
        self._used += written
        return 0, 0

    def close(self) -> None:
        """Flushes, and lets go of the mapped segments."""
        self.flush()
        self._index.clear()
        for m in self._maps:
            try:
                m.close()
            except BufferError:  # a value still viewing it; the mapping goes with it
                pass
        self._maps.clear()
