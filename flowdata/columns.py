"""Columns: a chunk's values of one node, kept as the one object they came as.

A ``@vectorized`` node that returns a tensor, an array or an Arrow record batch, table or
array gives the kernel one object for its whole chunk, and a table source's rows come as a
record batch. Splitting such an object into one Python value per sample costs more than the
work itself (a dict per row, a tensor view per row), so the kernel keeps it whole, as a
:class:`Column`: a read-only ``Sequence`` whose item ``i`` is sample ``i``'s value, exactly
what the per-row path would hold (``tensor[i]``, row ``i`` as a dict, ``array[i].as_py()``).
The values are made one by one only when something reads them one by one (a plain node, a
list parameter); the object itself goes on, as it is,

- to the next columnar parameter (:func:`as_form`): a parameter of a ``@vectorized`` node
  annotated ``torch.Tensor`` or ``numpy.ndarray`` receives the chunk's values stacked,
  ``pyarrow.RecordBatch`` or ``pyarrow.Table`` its rows as a record batch or table,
  ``pyarrow.Array`` its values as an Arrow array -- converted when the producer gave a list;
- to collation, where a stacked tensor already is the batch;
- to reducers that fold columns (:attr:`Column.data`, see :mod:`flowdata.reduce`).

This module never imports torch, numpy or pyarrow itself: a column holds what the node
returned, and a conversion imports only what it converts to.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

__all__ = ["FORMS", "ArrowRows", "ArrowValues", "Column", "StackError", "Stacked", "as_column", "as_form", "form_of",
           "take"]

FORMS = {
    ("torch", "Tensor"): "tensor",
    ("numpy", "ndarray"): "ndarray",
    ("pyarrow.lib", "RecordBatch"): "record_batch",
    ("pyarrow.lib", "Table"): "table",
    ("pyarrow.lib", "Array"): "arrow_array",
    ("pyarrow.lib", "ChunkedArray"): "chunked_array",
}
"""Annotations of a ``@vectorized`` parameter that ask for the chunk's values as one column,
by (module, name) of the type, and the form each names."""


def form_of(tp: Any) -> str:
    """The columnar form an annotation asks for (see :data:`FORMS`), or ``""`` (a list)."""
    return FORMS.get((getattr(tp, "__module__", ""), getattr(tp, "__qualname__", "")), "")


class Column(Sequence[Any]):
    """One node's values for a chunk of samples, held as one object (:attr:`data`)."""

    __slots__ = ("_rows", "data")

    def __init__(self, data: Any):
        self.data = data
        self._rows: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.data)

    def rows(self) -> list[Any]:
        """Every sample's value, one by one (made once, then kept)."""
        if self._rows is None:
            self._rows = self._split()
        return self._rows

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> Column: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return self.take(range(start, stop, step))
            return type(self)(self._slice(start, max(start, stop)))
        if self._rows is not None:
            return self._rows[i]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} of a column of {n}")
        return self._one(i % n)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows())

    def row_bytes(self) -> int:
        """About the memory of one sample's value (for sizing chunks)."""
        return int(getattr(self.data, "nbytes", 0)) // max(1, len(self))

    def take(self, positions: Sequence[int]) -> Column:
        """The values at ``positions``, as a column of the same kind."""
        return type(self)(self._take(list(positions)))

    def __reduce__(self) -> Any:
        return (type(self), (self.data,))

    def __eq__(self, other: object) -> bool:
        """Equal to a list, tuple or column of the same values (tensors compared as a list of them compares)."""
        if isinstance(other, (list, tuple, Column)):
            return self.rows() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.data).__name__}, {len(self)} samples)"

    def _split(self) -> list[Any]:
        raise NotImplementedError

    def _one(self, i: int) -> Any:
        raise NotImplementedError

    def _slice(self, start: int, stop: int) -> Any:
        raise NotImplementedError

    def _take(self, positions: list[int]) -> Any:
        raise NotImplementedError


class Stacked(Column):
    """A tensor or array whose first dimension is the chunk: sample ``i``'s value is row ``i``
    (a view, as the per-row path holds it)."""

    __slots__ = ()

    def _split(self) -> list[Any]:
        unbind = getattr(self.data, "unbind", None)  # torch: one call for every row view
        return list(unbind(0)) if unbind is not None else list(self.data)

    def _one(self, i: int) -> Any:
        return self.data[i]

    def _slice(self, start: int, stop: int) -> Any:
        return self.data[start:stop]

    def _take(self, positions: list[int]) -> Any:
        if hasattr(self.data, "unbind"):
            import torch

            return self.data[torch.tensor(positions, dtype=torch.int64)]
        return self.data[positions]


class ArrowRows(Column):
    """A ``pyarrow.RecordBatch`` or ``Table``: sample ``i``'s value is row ``i`` as a dict."""

    __slots__ = ("_reads",)

    def __init__(self, data: Any):
        super().__init__(data)
        self._reads = 0

    def __reduce__(self) -> Any:
        return (_from_ipc, (type(self), _to_ipc(self.data), type(self.data).__name__))

    def _split(self) -> list[Any]:
        return self.data.to_pylist()  # type: ignore[no-any-return]

    def _one(self, i: int) -> Any:
        self._reads += 1
        if self._reads > 8:  # code that reads rows one by one reads the others next
            return self.rows()[i]
        return self.data.slice(i, 1).to_pylist()[0]  # the first row's type check, a failure's item

    def _slice(self, start: int, stop: int) -> Any:
        return self.data.slice(start, stop - start)

    def _take(self, positions: list[int]) -> Any:
        import pyarrow as pa

        return self.data.take(pa.array(positions, pa.int64()))


class ArrowValues(Column):
    """A ``pyarrow.Array`` or ``ChunkedArray``: sample ``i``'s value is ``array[i].as_py()``."""

    __slots__ = ()

    def __reduce__(self) -> Any:
        import pyarrow as pa

        return (_from_ipc, (type(self), _to_ipc(pa.table({"values": self.data})), type(self.data).__name__))

    def _split(self) -> list[Any]:
        return self.data.to_pylist()  # type: ignore[no-any-return]

    def _one(self, i: int) -> Any:
        return self.rows()[i]  # code that reads one value reads the others next

    def _slice(self, start: int, stop: int) -> Any:
        return self.data.slice(start, stop - start)

    def _take(self, positions: list[int]) -> Any:
        import pyarrow as pa

        return self.data.take(pa.array(positions, pa.int64()))


def _to_ipc(data: Any) -> bytes:
    """An Arrow record batch or table as Arrow IPC bytes. Pickling a slice would copy its
    whole buffers (8 MB for 5 rows of a million-row column); IPC writes the slice's rows."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def _from_ipc(kind: type[Column], payload: bytes, name: str) -> Column:
    import pyarrow as pa

    table = pa.ipc.open_stream(payload).read_all()
    if kind is ArrowValues:
        values = table.column(0)
        return kind(values if name == "ChunkedArray" else values.combine_chunks())
    if name == "RecordBatch":
        batches = table.combine_chunks().to_batches()
        return kind(batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema))
    return kind(table)


_KINDS = {"Tensor": Stacked, "ndarray": Stacked, "RecordBatch": ArrowRows, "Table": ArrowRows,
          "Array": ArrowValues, "ChunkedArray": ArrowValues}


def as_column(got: Any) -> Sequence[Any] | None:
    """What a ``@vectorized`` call returned, kept whole when it is one object for the chunk
    (a tensor, an array, an Arrow record batch, table or array); None when it is not one."""
    t = type(got)
    module = t.__module__
    if not (module.startswith("torch") or module.startswith("numpy") or module.startswith("pyarrow")):
        return None
    kind = _KINDS.get(t.__name__)
    if kind is None and module.startswith("pyarrow") and isinstance(got, _arrow_array()):
        kind = ArrowValues  # pyarrow's typed arrays: DoubleArray, StringArray, ...
    if kind is None or (kind is Stacked and getattr(got, "ndim", 0) == 0):
        return None
    return kind(got)


def _arrow_array() -> type[Any]:
    import pyarrow as pa

    return pa.Array  # type: ignore[no-any-return]


def take(values: Sequence[Any], positions: Sequence[int]) -> Sequence[Any]:
    """The values at ``positions``: a column stays a column, anything else becomes a list."""
    if isinstance(values, Column):
        return values.take(positions)
    return [values[p] for p in positions]


def as_form(values: Sequence[Any], form: str) -> Any:
    """A chunk's values as a ``@vectorized`` parameter of ``form`` receives them (see
    :data:`FORMS`; ``""``: a list). A column of that form is handed over as it is; values
    one by one are stacked or converted.

    Raises:
        StackError: values of different shapes, asked for stacked.
    """
    if not form:
        return values if type(values) is list else list(values)
    data = values.data if isinstance(values, Column) else None
    if form in ("tensor", "ndarray"):
        return _stacked(values, data, form)
    import pyarrow as pa

    if form in ("record_batch", "table"):
        if isinstance(data, pa.RecordBatch):
            return data if form == "record_batch" else pa.Table.from_batches([data])
        if isinstance(data, pa.Table):
            if form == "table":
                return data
            batches = data.combine_chunks().to_batches()
            return batches[0] if len(batches) == 1 else pa.RecordBatch.from_pylist([], schema=data.schema)
        rows = list(values)
        return pa.RecordBatch.from_pylist(rows) if form == "record_batch" else pa.Table.from_pylist(rows)
    if isinstance(data, pa.ChunkedArray):
        return data if form == "chunked_array" else data.combine_chunks()
    if isinstance(data, pa.Array):
        return data if form == "arrow_array" else pa.chunked_array([data])
    array = pa.array(data if data is not None and getattr(data, "ndim", 2) == 1 and not hasattr(data, "unbind")
                     else list(values))
    return array if form == "arrow_array" else pa.chunked_array([array])


def _stacked(values: Sequence[Any], data: Any, form: str) -> Any:
    if data is not None and hasattr(data, "shape"):
        if form == "tensor":
            import torch

            return data if isinstance(data, torch.Tensor) else torch.from_numpy(data)
        return data.numpy() if hasattr(data, "unbind") else data
    rows = list(values)
    if form == "tensor":
        import torch

        if rows and all(isinstance(r, torch.Tensor) for r in rows):
            _same_shapes(rows)
            return torch.stack(rows)
        return torch.as_tensor(rows if rows else [])
    import numpy as np

    if rows and all(hasattr(r, "shape") for r in rows):
        _same_shapes(rows)
        return np.stack([np.asarray(r) for r in rows])
    return np.asarray(rows)


class StackError(ValueError):
    """A chunk's values of different shapes, asked for stacked: ``position`` is the first
    value whose shape is not the first one's."""

    def __init__(self, position: int, first: tuple[int, ...], shape: tuple[int, ...]):
        super().__init__(f"the value at position {position} of the chunk has shape {list(shape)}, the first one "
                         f"{list(first)}: values of different shapes cannot be stacked")
        self.position, self.first, self.shape = position, first, shape


def _same_shapes(rows: list[Any]) -> None:
    first = tuple(rows[0].shape)
    for i, r in enumerate(rows):
        if tuple(r.shape) != first:
            raise StackError(i, first, tuple(r.shape))
