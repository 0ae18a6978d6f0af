"""The sample cache on disk: per-sample values as raw arrays in checksummed segment files.

A cached node's values live in a folder of their own (named after the node and the digest
of everything its values depend on, :mod:`flowdata.run.samplecache`), as **segments**:
files that one writer (one process) fills and renames into place in one step, never
changed afterwards, that readers memory-map::

    b"FDSAMPLE1\\n"                         magic
    record, record, ...                    each: u32 header length, JSON header, raw buffers
    index (JSON: [[key, offset, length, crc32], ...])
    u64 index length, u32 crc32 of the index, b"FDSEGEND\\n"

A record holds one value: tensors, numpy arrays and scalars as dtype, shape and raw bytes;
numbers, strings, bytes and ``None``; dicts (string keys), lists and tuples of those. What
else a node returns is an error naming it. Nothing is ever unpickled: a record is decoded
from its JSON header and its bytes, after its CRC-32 matches. A segment whose index does
not check out (truncated, overwritten, foreign), or holds a record whose bytes do not
match its checksum, is left out whole and removed: logged once with its path, its samples
are computed again and written anew.

A folder that cannot be written (read-only, a full disk, a file in the way) leaves nothing
behind (a segment is written to a temporary name and renamed into place, or removed) and
gives one warning naming the ``cache_dir``; the values go on being computed, counted as
``not_cached``, and what the folder holds is still read. Both warnings are *notes*
(:data:`flowdata.cache.Note`) that travel with the chunk's result to the process driving
the run, which logs each once (:func:`take_notes`): several workers meeting one damaged
segment or one full disk give one warning, in the main process.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import uuid
import zlib
from typing import Any

__all__ = ["MISS", "SampleStore", "decode_value", "disk_use", "encode_value", "take_notes"]


_MAGIC, _END = b"FDSAMPLE1\n", b"FDSEGEND\n"
_FOOTER = struct.Struct("<QI")
MISS: Any = object()
"""What :meth:`SampleStore.get` returns for a key it does not hold (or holds damaged)."""


def encode_value(value: Any) -> bytes:
    """One value as a record's body: a JSON header, then the raw bytes of its arrays.

    Raises:
        TypeError: a value of another kind (names its type and where in the value it is).
    """
    buffers: list[bytes] = []
    tree = _encode(value, buffers, "value")
    header = json.dumps(tree, separators=(",", ":")).encode()
    return b"".join([struct.pack("<I", len(header)), header, *buffers])


def _encode(value: Any, buffers: list[bytes], where: str) -> Any:
    import numpy as np

    if value is None or isinstance(value, (bool, int, float, str)):
        return {"py": value}
    if isinstance(value, (bytes, bytearray)):
        buffers.append(bytes(value))
        return {"bytes": len(value)}
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        try:
            arr = t.numpy()
        except TypeError as exc:
            raise TypeError(f"{where} is a {t.dtype} tensor, which has no raw-array form here: {exc}") from exc
        buffers.append(arr.tobytes())
        return {"tensor": arr.dtype.str, "shape": list(arr.shape), "n": arr.nbytes}
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise TypeError(f"{where} is a numpy array of Python objects")
        arr = np.require(arr, requirements="C")
        buffers.append(arr.tobytes())
        kind = "scalar" if isinstance(value, np.generic) else "array"
        return {kind: arr.dtype.str, "shape": list(arr.shape), "n": arr.nbytes}
    if isinstance(value, dict):
        keys = list(value)
        if not all(isinstance(k, str) for k in keys):
            raise TypeError(f"{where} is a dict with keys that are not strings")
        return {"dict": keys, "v": [_encode(value[k], buffers, f"{where}[{k!r}]") for k in keys]}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple":
                [_encode(v, buffers, f"{where}[{i}]") for i, v in enumerate(value)]}
    raise TypeError(f"{where} is a {type(value).__module__}.{type(value).__qualname__}")


def decode_value(body: bytes | memoryview) -> Any:
    """The value :func:`encode_value` wrote (arrays copied out of ``body``)."""
    (size,) = struct.unpack_from("<I", body, 0)
    tree = json.loads(bytes(body[4 : 4 + size]))
    at = [4 + size]
    return _decode(tree, body, at)


def _decode(tree: Any, body: bytes | memoryview, at: list[int]) -> Any:
    import numpy as np

    if "py" in tree:
        return tree["py"]
    if "bytes" in tree:
        n = tree["bytes"]
        out = bytes(body[at[0] : at[0] + n])
        at[0] += n
        return out
    for kind in ("tensor", "array", "scalar"):
        if kind in tree:
            dt = np.dtype(tree[kind])
            arr = np.frombuffer(body, dtype=dt, count=tree["n"] // dt.itemsize if dt.itemsize else 0,
                                offset=at[0]).reshape(tree["shape"]).copy()
            at[0] += tree["n"]
            if kind == "tensor":
                import torch

                return torch.from_numpy(arr)
            return arr[()] if kind == "scalar" else arr
    if "dict" in tree:
        return {k: _decode(v, body, at) for k, v in zip(tree["dict"], tree["v"], strict=True)}
    if "list" in tree:
        return [_decode(v, body, at) for v in tree["list"]]
    return tuple(_decode(v, body, at) for v in tree["tuple"])


def _torch() -> Any:
    import sys

    return sys.modules.get("torch")


_SIZES: dict[str, int] = {}  # segment path -> size (segments never change once in place)
_NOTES: list[tuple[str, str, str]] = []  # this process's notes not yet sent (see the module docstring)


def take_notes() -> list[tuple[str, str, str]]:
    """The warnings this process's stores made since the last call (to be said once, where
    the run is driven: :func:`flowdata.cache.say`)."""
    if not _NOTES:
        return []
    notes = _NOTES[:]
    del _NOTES[:]
    return notes


def disk_use(root: str) -> int:
    """Bytes of every segment under ``root`` (the ``samples`` folder of a ``cache_dir``:
    every cached node's folder, those of older code included)."""
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
            if not name.endswith(".seg"):
                continue
            path = os.path.join(root, sub, name)
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
        """Takes in the segments other writers renamed into place since the last look."""
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
        try:
            with open(path, "rb") as f:
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
        tmp = os.path.join(self.folder, f".{name}.tmp")
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
            from flowdata.cache import unwritable

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
