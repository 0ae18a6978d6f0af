"""The sample cache on disk: per-sample values as raw arrays in checksummed segment files.

A cached node's values live in a folder of their own (named after the node and the digest
of everything its values depend on, :mod:`flowdata.run.caching.samplecache`), as **segments**:
files that one writer (one process) fills and renames into place in one step, never
changed afterwards, that readers memory-map::

    b"FDSAMPLE1\\n"                         magic
    record, record, ...                    each: u32 header length, JSON header, raw buffers
    index (JSON: [[key, offset, length, crc32], ...])
    u64 index length, u32 crc32 of the index, b"FDSEGEND\\n"

A record holds one value, which comes back of the same type with the same value: tensors
(any dtype, bfloat16 included; sparse ones by their indices and values; conjugate and
negative views resolved; on the CPU, with their ``requires_grad``), numpy arrays and
scalars (structured dtypes included) as dtype, shape and raw bytes; ``None``, ``bool``,
``int``, ``float``, ``complex``, ``str``, ``bytes`` and ``bytearray`` (exactly those types:
an ``np.float64`` is a numpy scalar, an ``IntEnum`` an enum); dicts (string keys), lists
and tuples of those; namedtuples and enums, by their class's name and their fields or
value (the class is found among the modules the reading process has imported; a record
whose class is not there is computed again). What else a node returns -- a dict
subclass, a dataclass, a numpy array of objects, a quantized tensor -- is an error naming
it when first written. Nothing is ever unpickled: a record is decoded from its JSON
header and its bytes, after its CRC-32 matches. A segment whose index does
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

import enum
import json
import mmap
import os
import re
import struct
import sys
import uuid
import zlib
from typing import Any

from flowdata.run import writers

__all__ = ["MISS", "NotImported", "SampleStore", "decode_value", "disk_use", "encode_value", "sweep", "take_notes"]


_MAGIC, _END = b"FDSAMPLE1\n", b"FDSEGEND\n"
_FOOTER = struct.Struct("<QI")
MISS: Any = object()
"""What :meth:`SampleStore.get` returns for a key it does not hold (or holds damaged)."""


class NotImported(Exception):
    """A record of a namedtuple or enum whose class this process has not imported."""


def encode_value(value: Any) -> bytes:
    """One value as a record's body: a JSON header, then the raw bytes of its arrays.

    Raises:
        TypeError: a value of another kind (names its type and where in the value it is).
    """
    buffers: list[bytes] = []
    try:
        tree = _encode(value, buffers, "value")
    except TypeError:
        raise
    except Exception as exc:  # torch or numpy refusing a layout: the value cannot be stored
        raise TypeError(f"value cannot be stored: {type(exc).__name__}: {exc}") from exc
    header = json.dumps(tree, separators=(",", ":")).encode()
    return b"".join([struct.pack("<I", len(header)), header, *buffers])


_PY = (bool, int, float, str)


def _encode(value: Any, buffers: list[bytes], where: str) -> Any:
    t = type(value)
    if value is None or t in _PY:  # exact types: an IntEnum or np.float64 is not an int or a float
        return {"py": value}
    if t is complex:
        return {"complex": [value.real, value.imag]}
    if t is bytes or t is bytearray:
        buffers.append(bytes(value))
        return {t.__name__: len(value)}
    if t is dict:
        keys = list(value)
        if not all(type(k) is str for k in keys):
            raise TypeError(f"{where} is a dict with keys that are not strings")
        return {"dict": keys, "v": [_encode(value[k], buffers, f"{where}[{k!r}]") for k in keys]}
    if t is list or t is tuple:
        return {t.__name__: [_encode(v, buffers, f"{where}[{i}]") for i, v in enumerate(value)]}
    np = sys.modules.get("numpy")
    if np is not None and (t is np.ndarray or t is np.memmap or isinstance(value, np.generic)):
        return _encode_array(np, value, buffers, where)
    torch = sys.modules.get("torch")
    if torch is not None and t is torch.Tensor:
        return _encode_tensor(torch, value, buffers, where)
    if isinstance(value, tuple) and hasattr(t, "_fields"):  # a namedtuple: its fields, and its class by name
        return {"namedtuple": _class_name(t, where), "v": [_encode(v, buffers, f"{where}.{f}")
                                                           for f, v in zip(t._fields, value, strict=True)]}
    if isinstance(value, enum.Enum):
        return {"enum": _class_name(t, where), "v": _encode(value.value, buffers, f"{where}.value")}
    raise TypeError(f"{where} is a {t.__module__}.{t.__qualname__}")


def _class_name(cls: type, where: str) -> str:
    """``module:qualname`` of a class that a reader finds again by that name."""
    if _find_class(f"{cls.__module__}:{cls.__qualname__}") is not cls:
        raise TypeError(f"{where} is a {cls.__module__}.{cls.__qualname__}, a class that cannot be found again by "
                        "its name (defined inside a function?)")
    return f"{cls.__module__}:{cls.__qualname__}"


def _find_class(name: str) -> Any:
    """A namedtuple or enum class by name, from a module this process has imported (none
    is imported here: reading a record never runs code)."""
    module, _, qualname = name.partition(":")
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _encode_array(np: Any, value: Any, buffers: list[bytes], where: str) -> Any:
    arr = np.asarray(value)
    if arr.dtype.hasobject:
        raise TypeError(f"{where} is a numpy array of Python objects")
    dtype = _dtype_tree(arr.dtype)
    if _dtype_of(np, dtype) != arr.dtype:
        raise TypeError(f"{where} is a numpy array of dtype {arr.dtype}, which has no raw form here")
    arr = np.require(arr, requirements="C")
    buffers.append(arr.tobytes())
    kind = "scalar" if isinstance(value, np.generic) else "array"
    return {kind: dtype, "shape": list(arr.shape), "n": arr.nbytes}


def _dtype_tree(dt: Any) -> Any:
    """A numpy dtype as JSON: its string, or a structured one field by field (offsets and
    size kept, so that the records' bytes mean the same)."""
    if dt.fields is not None:
        names = list(dt.names)
        return {"names": names, "formats": [_dtype_tree(dt.fields[n][0]) for n in names],
                "offsets": [dt.fields[n][1] for n in names], "itemsize": dt.itemsize, "aligned": dt.isalignedstruct}
    if dt.subdtype is not None:
        return {"sub": _dtype_tree(dt.subdtype[0]), "shape": list(dt.subdtype[1])}
    return dt.str


def _dtype_of(np: Any, tree: Any) -> Any:
    if isinstance(tree, str):
        return np.dtype(tree)
    if "sub" in tree:
        return np.dtype((_dtype_of(np, tree["sub"]), tuple(tree["shape"])))
    return np.dtype({"names": tree["names"], "formats": [_dtype_of(np, f) for f in tree["formats"]],
                     "offsets": tree["offsets"], "itemsize": tree["itemsize"]}, align=bool(tree["aligned"]))


def _encode_tensor(torch: Any, value: Any, buffers: list[bytes], where: str) -> Any:
    t = value.detach()
    grad = {"grad": True} if value.requires_grad else {}
    if t.layout == torch.sparse_coo:
        return {"sparse_coo": list(t.shape), "coalesced": t.is_coalesced(), **grad,
                "i": _encode_tensor(torch, t._indices(), buffers, where),
                "v": _encode_tensor(torch, t._values(), buffers, where)}
    if t.layout in _compressed(torch):
        row = t.layout in (torch.sparse_csr, torch.sparse_bsr)
        return {"sparse": str(t.layout).removeprefix("torch."), "shape": list(t.shape), **grad,
                "c": _encode_tensor(torch, t.crow_indices() if row else t.ccol_indices(), buffers, where),
                "p": _encode_tensor(torch, t.col_indices() if row else t.row_indices(), buffers, where),
                "v": _encode_tensor(torch, t.values(), buffers, where)}
    if t.layout != torch.strided or t.is_quantized or t.is_meta or t.is_nested:
        kind = "quantized" if t.is_quantized else "meta" if t.is_meta else "nested" if t.is_nested else str(t.layout)
        raise TypeError(f"{where} is a {kind} tensor, which has no raw form here")
    # Conjugate and negative views are resolved: the values are what they read as.
    flat = t.cpu().resolve_conj().resolve_neg().contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    buffers.append(data)
    return {"tensor": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "n": len(data), **grad}


def _compressed(torch: Any) -> tuple[Any, ...]:
    return (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def decode_value(body: bytes | memoryview) -> Any:
    """The value :func:`encode_value` wrote (arrays copied out of ``body``).

    Raises:
        NotImported: the record names a namedtuple or enum class this process has not
            imported (no damage: the sample is computed instead).
    """
    (size,) = struct.unpack_from("<I", body, 0)
    tree = json.loads(bytes(body[4 : 4 + size]))
    at = [4 + size]
    return _decode(tree, body, at)


def _decode(tree: Any, body: bytes | memoryview, at: list[int]) -> Any:
    if "py" in tree:
        return tree["py"]
    if "complex" in tree:
        return complex(*tree["complex"])
    for kind in ("bytes", "bytearray"):
        if kind in tree:
            n = tree[kind]
            out = body[at[0] : at[0] + n]
            at[0] += n
            return bytes(out) if kind == "bytes" else bytearray(out)
    if "tensor" in tree or "sparse_coo" in tree or "sparse" in tree:
        return _decode_tensor(tree, body, at)
    for kind in ("array", "scalar"):
        if kind in tree:
            import numpy as np

            dt = _dtype_of(np, tree[kind])
            arr = np.frombuffer(body, dtype=dt, count=tree["n"] // dt.itemsize if dt.itemsize else 0,
                                offset=at[0]).reshape(tree["shape"]).copy()
            at[0] += tree["n"]
            return arr[()] if kind == "scalar" else arr
    if "dict" in tree:
        return {k: _decode(v, body, at) for k, v in zip(tree["dict"], tree["v"], strict=True)}
    if "list" in tree:
        return [_decode(v, body, at) for v in tree["list"]]
    if "tuple" in tree:
        return tuple(_decode(v, body, at) for v in tree["tuple"])
    for kind in ("namedtuple", "enum"):
        if kind in tree:
            cls = _find_class(tree[kind])
            if cls is None:
                raise NotImported(f"class {tree[kind]} is not imported in this process")
            if kind == "enum":
                return cls(_decode(tree["v"], body, at))
            return cls._make([_decode(v, body, at) for v in tree["v"]])
    raise ValueError(f"a record of an unknown kind: {sorted(tree)}")


def _decode_tensor(tree: Any, body: bytes | memoryview, at: list[int]) -> Any:
    import torch

    t: Any
    if "sparse_coo" in tree:
        i, v = _decode_tensor(tree["i"], body, at), _decode_tensor(tree["v"], body, at)
        t = torch.sparse_coo_tensor(i, v, tree["sparse_coo"], is_coalesced=bool(tree["coalesced"]))
    elif "sparse" in tree:
        layout = getattr(torch, tree["sparse"], None)
        if layout not in _compressed(torch):
            raise ValueError(f"not a sparse layout: {tree['sparse']}")
        c, p, v = (_decode_tensor(tree[k], body, at) for k in ("c", "p", "v"))
        t = torch.sparse_compressed_tensor(c, p, v, tree["shape"], layout=layout)
    else:
        dtype = getattr(torch, tree["tensor"], None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"not a torch dtype: {tree['tensor']}")
        n = tree["n"]
        raw = bytearray(body[at[0] : at[0] + n])
        at[0] += n
        flat = torch.frombuffer(raw, dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        t = flat.view(dtype).reshape(tree["shape"])
    return t.requires_grad_() if tree.get("grad") else t


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
