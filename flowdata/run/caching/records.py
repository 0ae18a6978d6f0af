"""Column records: a chunk's small values of one cached node as one record of the sample cache.

A chunk's values of a cached node are stored as **one record** when each is small (at most
:data:`SMALL` bytes) and all are of one kind (:func:`pack`):

- **stacked**: values of one shape and dtype -- tensors, numpy arrays, numpy scalars,
  Python ``int`` (within int64), ``float`` or ``bool`` -- as one ``[n, ...]`` array;
- **ragged**: values of varying length -- lists of Python ints (in the narrowest integer
  type that holds them all) or of floats, tensors or arrays whose first dimension varies
  (the rest of their shape and their dtype shared), ``str`` (UTF-8, lone surrogates kept)
  or ``bytes`` -- their elements concatenated, with ``n + 1`` offsets.

The record is a JSON header (what kind, dtype, row shape, rows) and one or two raw buffers;
nothing is pickled. Anything else -- a dict, a value over :data:`SMALL` bytes, a tensor
that requires grad, a sparse or quantized one, values of mixed kinds -- is not packed: the
store keeps it one record per value (:mod:`flowdata.run.caching.codec`), as before.

Reading (:class:`ColumnRecord`, :func:`gather`) maps the record's buffers as numpy arrays
over the segment's memory map and copies out only the rows asked for: a chunk of hits from
stacked records becomes one fresh ``[n, ...]`` array or tensor (a :class:`~flowdata.columns.Stacked`
column when the node gave its values as one), a ragged row a slice. Every value comes back
as it went: of the same type, dtype, shape and value (a row of a stacked tensor is a view
of the chunk's fresh tensor, as a ``@vectorized`` node's rows are).
"""

from __future__ import annotations

import itertools
import json
import math
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flowdata.columns import Column, Stacked

__all__ = ["SMALL", "ColumnRecord", "Packed", "gather", "pack"]

SMALL = 4096
"""Bytes a value may take at most for its chunk's values to be packed into one record."""

_LENGTH = struct.Struct("<I")
_INTS = ("i1", "i2", "i4", "i8")


@dataclass(frozen=True)
class Packed:
    """A chunk's values as one column record: its header and buffers, and each row's bytes.

    Attributes:
        header: What the record holds (JSON).
        buffers: Its raw buffers, in order (numpy arrays or bytes).
        sizes: Each row's bytes in the buffers; the header and offsets count with row 0,
            so that the sizes add up to the record's length.
        values: The values packed (to pack fewer of them: :meth:`first`).
    """

    header: dict[str, Any]
    buffers: tuple[Any, ...]
    sizes: tuple[int, ...]
    values: Sequence[Any]

    @property
    def n(self) -> int:
        """The rows."""
        return len(self.sizes)

    def parts(self) -> list[Any]:
        """The record's bytes, in pieces to write one after the other."""
        head = json.dumps(self.header, separators=(",", ":")).encode()
        return [_LENGTH.pack(len(head)), head, *(memoryview(b).cast("B") for b in self.buffers)]

    def first(self, k: int) -> Packed | None:
        """The first ``k`` values as a record of their own (None for none)."""
        return pack(self.values[:k]) if k > 0 else None


def _sized(header: dict[str, Any], buffers: tuple[Any, ...], rows: list[int], values: Sequence[Any]) -> Packed:
    head = len(json.dumps(header, separators=(",", ":")).encode()) + _LENGTH.size
    extra = head + sum(memoryview(b).nbytes for b in buffers) - sum(rows)
    rows[0] += extra  # the header and the offsets count with the first row
    return Packed(header, buffers, tuple(rows), values)


def pack(values: Sequence[Any]) -> Packed | None:
    """The values as one column record, or None when they are not small values of one kind
    (see the module docstring)."""
    if not len(values):
        return None
    try:
        if isinstance(values, Stacked):
            return _pack_rows(values.data, len(values), values, column=True)
        if isinstance(values, Column):
            values = values.rows()
        first = values[0]
        t = type(first)
        torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
        if torch is not None and t is torch.Tensor:
            return _pack_tensors(torch, values)
        if np is not None and (t is np.ndarray or t is np.memmap):
            return _pack_arrays(np, values)
        if np is not None and isinstance(first, np.generic):
            return _pack_np_scalars(np, values, t)
        if t is int or t is float or t is bool:
            return _pack_py_scalars(values, t)
        if t is list:
            return _pack_lists(values)
        if t is str or t is bytes:
            return _pack_texts(values, t)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None  # values of no single kind: one record each
    return None


def _tensor_ok(torch: Any, v: Any, dtype: Any) -> bool:
    return (type(v) is torch.Tensor and v.dtype == dtype and v.layout == torch.strided and not v.requires_grad
            and not v.is_quantized and not v.is_meta and not v.is_nested and not v.is_conj() and not v.is_neg())


def _raw(torch: Any, t: Any, copy: bool = False) -> Any:
    """A tensor's bytes, as a numpy uint8 array (a copy with ``copy``: a node downstream may
    change the values in place before they are written)."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    if not flat.numel():
        return b""
    raw = flat.view(torch.uint8).numpy()
    return raw.copy() if copy else raw


def _pack_rows(data: Any, n: int, values: Sequence[Any], column: bool) -> Packed | None:
    """A tensor or array whose rows are the values (a ``@vectorized`` node's column)."""
    torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and isinstance(data, torch.Tensor):
        if not _tensor_ok(torch, data, data.dtype):
            return None
        row = data[0].numel() * data.element_size() if n else 0
        header = {"v": "stack", "as": "tensor", "dtype": _torch_name(data.dtype), "shape": list(data.shape[1:]),
                  "n": n, "col": column}
        return None if row > SMALL else _sized(header, (_raw(torch, data, copy=column),), [row] * n, values)
    if np is not None and type(data) in (np.ndarray, np.memmap):
        dt = _plain_dtype(np, data.dtype)
        if dt is None or data.ndim == 0:
            return None
        row = data[0].nbytes
        header = {"v": "stack", "as": "ndarray", "dtype": dt, "shape": list(data.shape[1:]), "n": n, "col": column}
        arr = np.array(data, order="C", copy=True).reshape(-1).view(np.uint8)
        return None if row > SMALL else _sized(header, (arr,), [row] * n, values)
    return None


def _pack_tensors(torch: Any, values: Sequence[Any]) -> Packed | None:
    first = values[0]
    if not all(_tensor_ok(torch, v, first.dtype) for v in values):
        return None
    shape = first.shape
    if all(v.shape == shape for v in values):
        return _pack_rows(torch.stack(list(values)), len(values), values, column=False)
    if first.dim() == 0 or not all(v.dim() == first.dim() and v.shape[1:] == shape[1:] for v in values):
        return None
    size = first.element_size() * math.prod(shape[1:])
    lengths = [int(v.shape[0]) for v in values]
    if max(lengths) * size > SMALL:
        return None
    header = {"v": "ragged", "as": "tensor", "dtype": _torch_name(first.dtype), "shape": list(shape[1:])}
    return _ragged(header, lengths, size, _raw(torch, torch.cat(list(values))), values)


def _pack_arrays(np: Any, values: Sequence[Any]) -> Packed | None:
    dtype = values[0].dtype
    dt = _plain_dtype(np, dtype)
    if dt is None or not all(type(v) in (np.ndarray, np.memmap) and v.dtype == dtype for v in values):
        return None
    shape = values[0].shape
    if all(v.shape == shape for v in values):
        if values[0].nbytes > SMALL:
            return None
        header = {"v": "stack", "as": "ndarray", "dtype": dt, "shape": list(shape), "n": len(values), "col": False}
        # np.stack makes the native byte order: the values' own is kept
        data = np.stack(values).astype(dtype, copy=False).reshape(-1).view(np.uint8) if values[0].size else b""
        return _sized(header, (data,), [values[0].nbytes] * len(values), values)
    if values[0].ndim == 0 or not all(v.ndim == values[0].ndim and v.shape[1:] == shape[1:] for v in values):
        return None
    size = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
    lengths = [int(v.shape[0]) for v in values]
    if max(lengths) * size > SMALL:
        return None
    header = {"v": "ragged", "as": "ndarray", "dtype": dt, "shape": list(shape[1:])}
    return _ragged(header, lengths, size, np.concatenate(values).astype(dtype, copy=False).reshape(-1).view(np.uint8),
                   values)


def _pack_np_scalars(np: Any, values: Sequence[Any], t: Any) -> Packed | None:
    dtype = values[0].dtype
    dt = _plain_dtype(np, dtype)
    if dt is None or dtype.itemsize > SMALL or not all(type(v) is t and v.dtype == dtype for v in values):
        return None
    header = {"v": "stack", "as": "scalar", "dtype": dt, "shape": [], "n": len(values), "col": False}
    return _sized(header, (np.array(values, dtype=dtype).view(np.uint8),), [dtype.itemsize] * len(values), values)


def _pack_py_scalars(values: Sequence[Any], t: type) -> Packed | None:
    import numpy as np

    if set(map(type, values)) != {t}:
        return None
    dtype = np.dtype({int: "i8", float: "f8", bool: "?"}[t])
    header = {"v": "stack", "as": t.__name__, "dtype": dtype.str, "shape": [], "n": len(values), "col": False}
    data = np.fromiter(values, dtype=dtype, count=len(values))  # an int past int64 overflows: not packed
    return _sized(header, (data.view(np.uint8),), [dtype.itemsize] * len(values), values)


def _pack_lists(values: Sequence[Any]) -> Packed | None:
    import numpy as np

    if set(map(type, values)) != {list}:
        return None
    kinds = set(map(type, itertools.chain.from_iterable(values)))
    if not kinds <= {int} and not kinds <= {float}:
        return None
    lengths = [len(v) for v in values]
    total = sum(lengths)
    if float in kinds:
        flat, of = np.fromiter(itertools.chain.from_iterable(values), dtype=np.float64, count=total), "float"
    else:
        flat, of = np.fromiter(itertools.chain.from_iterable(values), dtype=np.int64, count=total), "int"
        if total:
            low, high = int(flat.min()), int(flat.max())
            narrow = next(d for d in _INTS if np.iinfo(d).min <= low and high <= np.iinfo(d).max)
            flat = flat.astype(narrow)
    if max(lengths) * flat.itemsize > SMALL:
        return None
    header = {"v": "ragged", "as": f"list-{of}", "dtype": flat.dtype.str, "shape": []}
    return _ragged(header, lengths, flat.itemsize, flat.view(np.uint8), values)


def _pack_texts(values: Sequence[Any], t: type) -> Packed | None:
    import numpy as np

    if set(map(type, values)) != {t}:
        return None
    raw = [v.encode("utf-8", "surrogatepass") for v in values] if t is str else list(values)
    lengths = [len(r) for r in raw]
    if max(lengths) > SMALL:
        return None
    header = {"v": "ragged", "as": t.__name__, "dtype": "|u1", "shape": []}
    return _ragged(header, lengths, 1, np.frombuffer(b"".join(raw), dtype=np.uint8), values)


def _ragged(header: dict[str, Any], lengths: list[int], size: int, data: Any, values: Sequence[Any]) -> Packed:
    import numpy as np

    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    header["n"] = len(lengths)
    return _sized(header, (offsets.view(np.uint8), data), [k * size for k in lengths], values)


def _torch_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _plain_dtype(np: Any, dtype: Any) -> str | None:
    """A numpy dtype as the string that makes it again; None for one that has no raw form
    here (structured, sub-array, objects: such values keep one record each)."""
    if (dtype.fields is not None or dtype.subdtype is not None or dtype.hasobject or not dtype.itemsize
            or np.dtype(dtype.str) != dtype):
        return None
    return str(dtype.str)


class ColumnRecord:
    """A column record read back, its buffers as numpy arrays over ``body`` (checked by the
    caller against the record's checksum first).

    Raises:
        ValueError: the record does not hold what its header says (damage).
    """

    def __init__(self, body: memoryview):
        import numpy as np

        (size,) = _LENGTH.unpack_from(body, 0)
        header = json.loads(bytes(body[4 : 4 + size]))
        self.kind, self.of, self.n = header["v"], header["as"], int(header["n"])
        self.column = bool(header.get("col"))
        self.shape = tuple(int(s) for s in header["shape"])
        self.torch_dtype: Any = None
        if self.of == "tensor":
            import torch

            self.torch_dtype = getattr(torch, header["dtype"], None)
            if not isinstance(self.torch_dtype, torch.dtype):
                raise ValueError(f"not a torch dtype: {header['dtype']}")
            self.itemsize = torch.empty(0, dtype=self.torch_dtype).element_size()
            self.dtype = np.dtype(np.uint8)
        else:
            self.dtype = np.dtype(header["dtype"])
            self.itemsize = self.dtype.itemsize
        per = self.itemsize * int(np.prod(self.shape, dtype=np.int64))
        at = 4 + size
        if self.kind == "stack":
            self.row = per
            self.raw = np.frombuffer(body, dtype=np.uint8, count=self.n * per, offset=at).reshape(self.n, per)
            at += self.n * per
            self.sizes = np.full(self.n, per, dtype=np.int64)
        elif self.kind == "ragged":
            self.offsets = np.frombuffer(body, dtype=np.int64, count=self.n + 1, offset=at)
            at += 8 * (self.n + 1)
            if self.offsets[0] != 0 or (np.diff(self.offsets) < 0).any():
                raise ValueError("a column record's offsets are out of order")
            self.row = per
            count = int(self.offsets[-1]) * per
            self.raw = np.frombuffer(body, dtype=np.uint8, count=count, offset=at)
            at += count
            self.sizes = np.diff(self.offsets) * per
        else:
            raise ValueError(f"a column record of an unknown kind: {self.kind!r}")
        if at != len(body):
            raise ValueError(f"a column record of {len(body)} bytes holds {at}")
        self.sizes[:1] += len(body) - int(self.sizes.sum())  # the header and offsets, with row 0 (as written)

    def share(self, rows: Sequence[int]) -> int:
        """The bytes of these rows (the header's and offsets' with row 0)."""
        return int(self.sizes[list(rows)].sum())

    def values(self, rows: Sequence[int]) -> list[Any]:
        """The values of ``rows`` of a ragged record."""
        off, raw, per = self.offsets, self.raw, self.row
        if self.of in ("list-int", "list-float"):
            flat = raw.view(self.dtype)
            return [flat[off[r] : off[r + 1]].tolist() for r in rows]
        if self.of == "str":
            return [raw[off[r] : off[r + 1]].tobytes().decode("utf-8", "surrogatepass") for r in rows]
        if self.of == "bytes":
            return [raw[off[r] : off[r + 1]].tobytes() for r in rows]
        out = []
        for r in rows:
            part = raw[off[r] * per : off[r + 1] * per].copy()
            length = int(off[r + 1] - off[r])
            out.append(_finish(self, part, (length, *self.shape)))
        return out


def _finish(rec: ColumnRecord, raw: Any, shape: tuple[int, ...]) -> Any:
    """Fresh bytes (a numpy uint8 array) as the record's tensor or array of ``shape``."""
    if rec.of == "tensor":
        import torch

        if raw.size == 0:
            return torch.empty(shape, dtype=rec.torch_dtype)
        return torch.from_numpy(raw.reshape(-1)).view(rec.torch_dtype).reshape(shape)
    return raw.reshape(-1).view(rec.dtype).reshape(shape)


def gather(parts: Sequence[tuple[ColumnRecord, list[int], list[int]]], n: int) -> tuple[dict[int, Any], Any]:
    """The values of a chunk's hits in column records: ``parts`` are ``(record, rows,
    positions)``, ``n`` the chunk's samples.

    Returns:
        The values by position; and, when every position hit a stacked record that came
        as a column (a ``@vectorized`` node's tensor or array), that column (else None).
    """
    import numpy as np

    found: dict[int, Any] = {}
    stacked = [p for p in parts if p[0].kind == "stack"]
    first = stacked[0][0] if stacked else None
    same = [p for p in stacked if (p[0].of, p[0].dtype, p[0].torch_dtype, p[0].shape) ==
            (first.of, first.dtype, first.torch_dtype, first.shape)] if first is not None else []
    for rec, rows, positions in parts:
        if rec.kind == "ragged":
            found.update(zip(positions, rec.values(rows), strict=True))
    others = [p for p in stacked if not any(p is s for s in same)]
    for group in (same, *([o] for o in others)):
        if not group:
            continue
        rec0 = group[0][0]
        at = sorted(itertools.chain.from_iterable(p[2] for p in group))
        slot = {q: i for i, q in enumerate(at)}
        out = np.empty((len(at), rec0.row), dtype=np.uint8)
        for rec, rows, positions in group:
            out[[slot[q] for q in positions]] = rec.raw[rows]
        data = _finish(rec0, out, (len(at), *rec0.shape))
        if rec0.column and len(at) == n and all(p[0].column for p in group):
            return {}, data
        found.update(zip(at, _rows(rec0, data), strict=True))
    return found, None


def _rows(rec: ColumnRecord, data: Any) -> list[Any]:
    """A stacked record's gathered rows as the values they were."""
    if rec.of == "tensor":
        return list(data.unbind(0))
    if rec.of == "ndarray":  # a column's row as Stacked gives it; a value's 0-d array as it was
        return [data[i] for i in range(len(data))] if rec.column else [data[i, ...] for i in range(len(data))]
    if rec.of == "scalar":
        return [data[i] for i in range(len(data))]
    return data.tolist()  # type: ignore[no-any-return]  # Python ints, floats, bools
