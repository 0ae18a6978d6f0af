"""The value codec: a value as bytes and back, exactly, without pickle.

A value encoded here comes back of the same type with the same value: tensors
(any dtype, bfloat16 included; sparse ones by their indices and values; conjugate and
negative views resolved; on the CPU, with their ``requires_grad``), numpy arrays and
scalars (structured dtypes included) as dtype, shape and raw bytes; ``None``, ``bool``,
``int``, ``float``, ``complex``, ``str``, ``bytes`` and ``bytearray`` (exactly those types:
an ``np.float64`` is a numpy scalar, an ``IntEnum`` an enum); dicts (string keys), lists
and tuples of those; namedtuples and enums, by their class's name and their fields or
value (the class is found among the modules the reading process has imported; a record
whose class is not there is computed again). What else a node returns -- a dict
subclass, a dataclass, a numpy array of objects, a quantized tensor -- is an error naming
it when first written.
Nothing is ever unpickled: a value is decoded from its JSON header and its raw buffers.

Used by the sample cache's store (:mod:`flowdata.run.caching.store`), by folding (a loose
value that travels) and by ranks sharing a pass (:mod:`flowdata.run.distributed.ranks`).
"""

from __future__ import annotations

import enum
import json
import struct
import sys
from typing import Any

__all__ = ["NotImported", "decode_value", "encode_value"]


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
