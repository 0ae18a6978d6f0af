"""Tabular features: table -> parsed numbers and categories -> statistics -> tensors.

Inputs and config (Hamilton-style; config entries are inputs too):

- ``table``: a CSV or Parquet path, a ``pyarrow.Table``, a pandas ``DataFrame`` or a Hugging
  Face ``datasets.Dataset`` (see :mod:`flowdata_modules._table`); each row is a sample;
  ``encoding`` (``"utf-8"``) and ``column_types`` (None: every column's type settled over the
  whole file) say how a CSV file is read;
- ``numeric_columns`` (required), ``category_columns`` (``()``), ``label_column``
  (``"label"``; None for a table without labels), ``missing`` (``"mean"`` or ``"raise"``),
  ``min_count`` (1: category values seen fewer times are unknown).

Outputs: ``numeric`` (float32 ``[len(numeric_columns)]``, each column standardised by its
own mean and standard deviation), ``categories`` (int64 ``[len(category_columns)]``: 0 for
a missing or unknown value, known values from 1, most frequent first, ties by value) and
``label`` (int64, the index in ``label_vocab``). Reductions: ``numeric_stats``
(per-column ``Stats`` of the raw numbers, missing cells left out; ``shift`` and ``offset``
are the exact form of the mean, see :class:`~flowdata.stats.Welford`), ``category_vocabs`` (one
``Vocab`` per category column), ``missing_counts`` (missing cells per column) and
``label_vocab``.

Numbers are parsed once per sample (``parsed``, float64, NaN for a missing cell) and
standardised in float64 before the cast to float32, so a column around 1e15 with a spread
of 1 keeps its spread. A column whose values are all equal (its minimum is its maximum) or
that has no value at all normalises to 0.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from flowdata import Collect, Parallel, reduce, vectorized
from flowdata.stats import Stats, Vocab, Vocabulary, Welford
from flowdata_modules._manifest import LabelVocabulary, class_names as _class_names
from flowdata.columns import ArrowRows, Stacked
from flowdata_modules._table import bad_rows, label_texts, names_of, row_error, table_columns

_log = logging.getLogger("flowdata")

MISSING_TEXT = frozenset(
    ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "N/A", "NA",
     "NULL", "NaN", "n/a", "nan", "null"]
)
"""Text that is a missing number (pyarrow's and pandas' CSV null markers), once stripped."""

MISSING_MODES = ("mean", "raise")


# --- the samples -----------------------------------------------------------------------------


def row(
    table: object,
    numeric_columns: Sequence[str],
    category_columns: Sequence[str] = (),
    label_column: str | None = "label",
    missing: str = "mean",
    encoding: str = "utf-8",
    column_types: Mapping[str, str] | None = None,
) -> Parallel[dict[str, Any]]:
    """The samples: the table's rows, its named columns only (the table itself, not a copy:
    flowdata indexes it by rows, one dict per row). Every named column must exist. A CSV
    file's text is decoded with ``encoding``; ``column_types`` (column -> pyarrow type name,
    e.g. ``{"zip": "string"}``) declares how its columns are read, the others' types are
    settled over the whole file (see :mod:`flowdata_modules._table`)."""
    if missing not in MISSING_MODES:
        raise ValueError(f"missing={missing!r}: expected 'mean' (a missing number becomes the column's mean) or "
                         "'raise' (a missing number is an error)")
    for option, value in (("numeric_columns", numeric_columns), ("category_columns", category_columns)):
        if isinstance(value, str):
            raise TypeError(f"{option}={value!r}: expected a list of column names, got a string\n"
                            f"  fix: Builder().with_config({{{option!r}: [{value!r}]}})")
    columns = names_of(table, encoding)
    wanted = [*numeric_columns, *category_columns, *([label_column] if label_column is not None else [])]
    unknown = [(c, option) for option, names in (("numeric_columns", numeric_columns),
                                                  ("category_columns", category_columns),
                                                  ("label_column", [label_column] if label_column else []))
               for c in names if c not in columns]
    if unknown:
        named = ", ".join(f"{c!r} ({option})" for c, option in unknown)
        raise ValueError(
            f"the table has no column {named}; its columns: {', '.join(map(repr, columns)) or 'none'}\n"
            "  fix: name existing columns in the config, Builder().with_config({'numeric_columns': [...], "
            "'category_columns': [...], 'label_column': ...}) (label_column None for a table without labels)"
        )
    return table_columns(table, list(dict.fromkeys(wanted)), encoding, column_types)  # type: ignore[no-any-return]


# --- numbers ---------------------------------------------------------------------------------


@vectorized
def parsed(row: pa.RecordBatch, sample_index: np.ndarray, numeric_columns: Sequence[str],
           missing: str = "mean") -> torch.Tensor:
    """The row's numbers, float64 ``[len(numeric_columns)]``, NaN for a missing cell (with
    ``missing="raise"``, a missing cell is an error). Text that is not a number, and an
    infinite number, are errors naming the row, the column and the cell.

    A chunk's rows come as one record batch: columns of numbers, and of text that Arrow
    parses as numbers (after the null markers of :data:`MISSING_TEXT`), are converted
    column by column in Arrow and numpy; any other chunk (a cell Arrow cannot parse, a bad
    row, a missing cell under ``missing="raise"``, another type of column) is parsed cell by
    cell, with the same result or the cell's error."""
    if not bad_rows(row):
        out = _same_type_numbers(row, numeric_columns)
        if out is None:
            read = [_numbers(row.column(c)) for c in numeric_columns]
            columns = [c for c in read if c is not None]
            out = np.stack(columns, axis=1) if columns and len(columns) == len(read) else None
        if out is not None:
            out = out.astype(np.float64, copy=False)
            nan = np.isnan(out)
            has_nan = bool(nan.any())
            if not (missing == "raise" and has_nan) and bool(np.isfinite(out[~nan] if has_nan else out).all()):
                return torch.from_numpy(out)
    rows = row.to_pylist()
    for r in rows:  # a CSV file's bad row is its sample's error
        row_error(r)
    return torch.from_numpy(np.stack([_parse_row(r, int(i), numeric_columns, missing) for r, i in
                                      zip(rows, sample_index, strict=True)]).reshape(len(rows), len(numeric_columns)))


def _same_type_numbers(row: pa.RecordBatch, numeric_columns: Sequence[str]) -> np.ndarray | None:
    """The numeric columns as one ``[rows, columns]`` array in one Arrow call, when they are
    all of one float or integer type (a missing cell NaN); None otherwise."""
    if not numeric_columns:
        return None
    numbers = row.select(list(numeric_columns))
    kinds = {f.type for f in numbers.schema}
    if len(kinds) != 1:
        return None
    kind = next(iter(kinds))
    if not (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
        return None
    return np.asarray(numbers.to_tensor(null_to_nan=True, row_major=True))


_ASCII_SPACE = " \t\n\r\x0b\x0c"
"""What Arrow strips around a number's text: white space Python's ``str.strip`` strips too
(other white space leaves the cell to Python, which decides)."""


def _numbers(column: Any) -> np.ndarray | None:
    """A column of numbers (or of text Arrow parses as numbers) as float64, NaN for a missing
    cell; None when the column is read cell by cell instead (Arrow would not give exactly
    what Python's ``float`` gives: a decimal, a date, a cell Arrow cannot parse)."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = column.type
    if pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)  # type: ignore[no-any-return]
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    text = pc.utf8_trim(column, characters=_ASCII_SPACE)
    text = pc.if_else(pc.is_in(text, value_set=_MISSING_ARRAY), pa.scalar(None, text.type), text)
    try:
        return pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)  # type: ignore[no-any-return]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


_MISSING_ARRAY = pa.array(sorted(MISSING_TEXT), pa.string())


def _parse_row(row: dict[str, Any], sample_index: int, numeric_columns: Sequence[str], missing: str) -> np.ndarray:
    """One row's numbers, cell by cell (see :func:`parsed`)."""
    out = np.empty(len(numeric_columns), dtype=np.float64)
    for j, column in enumerate(numeric_columns):
        cell = row[column]
        value = _number(cell, column, sample_index)
        if math.isnan(value) and missing == "raise":
            raise ValueError(
                f"row {sample_index}, column {column!r}: the cell is missing ({cell!r}) and missing='raise'\n"
                "  fix: fill the cell, use missing='mean' (the column's mean, counted in missing_counts), "
                "or skip the row with on_error='skip'"
            )
        out[j] = value
    return out


def _number(cell: Any, column: str, index: int) -> float:
    """A cell as a float; NaN when it is missing (None, NaN, an empty or null-marker text)."""
    if _is_null(cell):
        return math.nan
    if isinstance(cell, str):
        text = cell.strip()
        if text in MISSING_TEXT:
            return math.nan
        try:
            value = float(text)
        except ValueError:
            raise ValueError(
                f"row {index}, column {column!r}: the cell {cell!r} is not a number\n"
                f"  fix: correct the cell, or leave {column!r} out of numeric_columns (a category column?), "
                "or skip the row with on_error='skip'"
            ) from None
    else:
        try:
            value = float(cell)
        except (TypeError, ValueError):
            raise ValueError(
                f"row {index}, column {column!r}: the cell {cell!r} ({type(cell).__name__}) is not a number\n"
                f"  fix: leave {column!r} out of numeric_columns, or convert the column to numbers"
            ) from None
    if math.isinf(value):
        raise ValueError(
            f"row {index}, column {column!r}: the cell {cell!r} is not a finite number\n"
            "  fix: correct the cell or leave it empty (a missing cell), or skip the row with on_error='skip'"
        )
    return value


def _is_null(cell: Any) -> bool:
    """None, a float NaN, or pandas' NA / NaT."""
    if cell is None:
        return True
    if isinstance(cell, (float, np.floating)):
        return bool(np.isnan(cell))
    return type(cell).__name__ in ("NAType", "NaTType")


@reduce(Welford, dim=0, nan="ignore")
def numeric_stats(parsed: Collect[torch.Tensor]) -> Stats:
    """Per-column mean, std, min, max and count of the raw numbers, missing cells left out
    (float64, accumulated about the column's first value, ``shift``: exact around 1e15, see
    :class:`~flowdata.stats.Welford`)."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


@dataclass(frozen=True)
class Scaling:
    """Per-column ``((x - shift) - offset) / std`` in float64; a missing cell (NaN) becomes 0."""

    columns: tuple[str, ...]
    shift: torch.Tensor
    offset: torch.Tensor
    std: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (float64 ``[..., columns]``) standardised, as float32."""
        z = ((x.to(torch.float64) - self.shift) - self.offset) / self.std
        return torch.nan_to_num(z, nan=0.0).to(torch.float32)


def numeric_scaling(numeric_stats: Stats, missing_counts: dict[str, int], numeric_columns: Sequence[str]) -> Scaling:
    """Each column's mean and standard deviation from ``numeric_stats`` (a plain
    :class:`~flowdata.stats.Stats` given as an input works too). A constant column (minimum
    equal to maximum) is shifted by its value with std 1, so it normalises to exactly 0; a
    column without any value normalises to 0 as well. Both, and columns with missing cells,
    are logged once per process (logger ``flowdata``) for a column and what its statistics
    say (its constant value, its count of missing cells): a second loader over the same data
    does not repeat it; the same column constant at another value is logged again."""
    columns = tuple(numeric_columns)
    width = len(columns)
    flat = {k: getattr(numeric_stats, k).reshape(-1).to(torch.float64) for k in ("mean", "std", "min", "max")}
    count = numeric_stats.count.reshape(-1)
    if numeric_stats.shift is not None and numeric_stats.offset is not None:  # a Welford's: the exact form
        shift = numeric_stats.shift.reshape(-1).to(torch.float64).clone()
        offset = numeric_stats.offset.reshape(-1).to(torch.float64).clone()
    else:
        shift, offset = flat["mean"].clone(), torch.zeros_like(flat["mean"])
    std = flat["std"].clone()
    # No sample was folded (a Welford without values has scalar statistics): nothing to
    # normalise by.
    if count.numel() != width or (numeric_stats.count.dim() == 0 and int(count.sum()) == 0):
        zeros = torch.zeros(width, dtype=torch.float64)
        return Scaling(columns, zeros, zeros, torch.ones(width, dtype=torch.float64))
    empty = count == 0
    constant = ~empty & (flat["min"] == flat["max"])
    shift = torch.where(empty, 0.0, torch.where(constant, flat["min"], shift))
    offset = torch.where(empty | constant, 0.0, offset)
    std = torch.where(empty | constant, 1.0, std)
    from flowdata.report import first_time  # each column's warning once per process

    values = flat["min"].tolist()
    for flag, what in ((empty, "have no value at all"), (constant, "are constant")):
        names = [c for c, f in zip(columns, flag.tolist()) if f]
        seen = tuple((what, c, values[columns.index(c)] if what == "are constant" else None) for c in names)
        if names and first_time(seen):
            _log.warning("tabular: numeric column(s) %s %s: they normalise to 0", ", ".join(map(repr, names)), what)
    gaps = {c: n for c, n in missing_counts.items() if c in columns and n}
    if gaps and first_time((("missing", tuple(gaps.items())),)):
        _log.warning("tabular: missing numeric cells replaced by the column's mean: %s",
                     ", ".join(f"{c!r} {n}" for c, n in gaps.items()))
    return Scaling(columns, shift, offset, std)



@vectorized
def numeric(parsed: torch.Tensor, numeric_scaling: Scaling) -> torch.Tensor:
    """The numbers standardised per column: float32 ``[len(numeric_columns)]``, 0 for a
    missing cell (a chunk's stacked rows at once)."""
    return numeric_scaling(parsed)


# --- categories ------------------------------------------------------------------------------


@vectorized
def category_values(row: pa.RecordBatch, category_columns: Sequence[str] = ()) -> pa.RecordBatch:
    """The row's category values as text (see :func:`_text`), None for a missing cell: a
    record batch with one string column per category column (each sample's value is its row,
    ``{column: text}``). Columns of strings and of integers are converted in Arrow, any other
    cell by cell. A bad row of a CSV file is that row's error."""
    if bad_rows(row):
        for r in row.to_pylist():
            row_error(r)
    columns = list(category_columns)
    if not columns:  # no column, but one (empty) value per row
        return pa.RecordBatch.from_struct_array(pa.array([{}] * row.num_rows, pa.struct([])))
    return pa.RecordBatch.from_arrays([_texts(row.column(c)) for c in columns], names=columns)


def _texts(column: Any) -> Any:
    """A column's cells as :func:`_text` writes them, as an Arrow string array."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = column.cast(pa.string())
        return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    if pa.types.is_integer(kind):
        return column.cast(pa.string())
    return pa.array([_text(v) for v in column.to_pylist()], pa.string())


def _text(cell: Any) -> str | None:
    """A category value's text: a string as it is, a whole number in decimal (``3`` and
    ``3.0`` are both ``"3"``, so a column pandas widened to floats keeps its names), other
    numbers by ``repr``; None for None, NaN, pandas' NA and the empty string."""
    if _is_null(cell) or cell == "":
        return None
    if isinstance(cell, str):
        return cell
    if isinstance(cell, (bool, np.bool_)):
        return str(bool(cell))
    if isinstance(cell, (int, np.integer)):
        return str(int(cell))
    if isinstance(cell, (float, np.floating)):
        return str(int(cell)) if float(cell).is_integer() else repr(float(cell))
    return str(cell)


class CategoryVocabularies:
    """One :class:`~flowdata.stats.Vocabulary` per category column; the result maps each
    column to its :class:`~flowdata.stats.Vocab` (missing values are not counted).

    Args:
        category_columns: The columns, in the order of the values.
        min_count: Values seen fewer times are left out (so they become unknown, 0).
    """

    def __init__(self, category_columns: Sequence[str] = (), min_count: int = 1):
        self.columns = tuple(category_columns)
        self.min_count = int(min_count)
        self.vocabularies = [Vocabulary(min_count=self.min_count) for _ in self.columns]

    exact = True  # integer counts: merged in any grouping alike

    def update(self, value: Mapping[str, str | None] | Sequence[str | None]) -> None:
        """Counts one row's values (``{column: text}``, or the texts in column order)."""
        cells = [value[c] for c in self.columns] if isinstance(value, Mapping) else value
        for vocabulary, v in zip(self.vocabularies, cells, strict=True):
            if v is not None:
                vocabulary.counts[v] += 1

    def fold(self, values: Sequence[Any]) -> None:
        """Counts a block of rows, column by column: a record batch's columns with
        ``pyarrow.compute.value_counts``, rows one by one otherwise."""
        if isinstance(values, ArrowRows):
            batch = values.data
            for c, vocabulary in zip(self.columns, self.vocabularies, strict=True):
                counted = pc.value_counts(batch.column(c).drop_null())
                if isinstance(counted, pa.ChunkedArray):
                    counted = counted.combine_chunks()
                vocabulary.counts.update(dict(zip(counted.field("values").to_pylist(),
                                                  counted.field("counts").to_pylist(), strict=True)))
            return
        for value in values:
            self.update(value)

    def merge(self, other: CategoryVocabularies) -> CategoryVocabularies:
        """Adds another's counts; returns self."""
        for mine, theirs in zip(self.vocabularies, other.vocabularies, strict=True):
            mine.merge(theirs)
        return self

    def result(self) -> dict[str, Vocab]:
        """Each column's vocabulary, most frequent first, ties in value order."""
        return {c: v.result() for c, v in zip(self.columns, self.vocabularies, strict=True)}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The columns, ``min_count`` and every column's tokens and counts."""
        state = {"columns": np.array(self.columns, dtype=str), "min_count": np.array(self.min_count)}
        for i, v in enumerate(self.vocabularies):
            tokens = list(v.counts)
            state[f"tokens_{i}"] = np.array(tokens, dtype=str)
            state[f"counts_{i}"] = np.array([v.counts[t] for t in tokens], dtype=np.int64)
        return state

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> CategoryVocabularies:
        """Restored from :meth:`state_dict`."""
        r = cls([str(c) for c in np.asarray(state["columns"])], int(np.asarray(state["min_count"])))
        for i, v in enumerate(r.vocabularies):
            for t, n in zip(np.asarray(state[f"tokens_{i}"]), np.asarray(state[f"counts_{i}"]), strict=True):
                v.counts[str(t)] = int(n)
        return r


@reduce(CategoryVocabularies)
def category_vocabs(category_values: Collect[dict[str, Any]], category_columns: Sequence[str] = (),
                    min_count: int = 1) -> dict[str, Vocab]:
    """One vocabulary per category column (values seen at least ``min_count`` times)."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


@vectorized
def categories(category_values: pa.RecordBatch, category_vocabs: dict[str, Vocab],
               category_columns: Sequence[str] = ()) -> torch.Tensor:
    """int64 ``[len(category_columns)]``: a value's index in its column's vocabulary plus 1;
    0 for a missing value or one not in the vocabulary (a chunk's column at a time)."""
    out = np.zeros((category_values.num_rows, len(category_columns)), dtype=np.int64)
    for j, c in enumerate(category_columns):
        # a dict lookup per cell: Arrow's index_in would build a hash table of the whole
        # vocabulary on every call, which costs more for a batch of a few hundred rows
        out[:, j] = np.array(category_vocabs[c].ids(category_values.column(c).to_pylist()), dtype=np.int64) + 1
    return torch.from_numpy(out)


@vectorized
def missing_cells(parsed: torch.Tensor, category_values: pa.RecordBatch) -> torch.Tensor:
    """bool ``[numeric + category columns]``: which of the row's cells are missing.

    In numpy: a statistics pass runs in the main process, where torch would spread an op
    on a chunk over its thread pool (and wait for it) for a few microseconds of work."""
    numbers = parsed.numpy()
    out = np.zeros((len(numbers), numbers.shape[1] + category_values.num_columns), dtype=bool)
    np.isnan(numbers, out=out[:, : numbers.shape[1]])
    for j, column in enumerate(category_values.columns):
        out[:, numbers.shape[1] + j] = column.is_null().to_numpy(zero_copy_only=False)
    return torch.from_numpy(out)


class MissingCounts:
    """Counts missing cells per column; the result maps every column to its count.

    Args:
        numeric_columns: The numeric columns (the first positions of a value).
        category_columns: The category columns (the last positions).
    """

    exact = True  # integer counts: merged in any grouping alike

    def __init__(self, numeric_columns: Sequence[str] = (), category_columns: Sequence[str] = ()):
        self.columns = (*numeric_columns, *category_columns)
        self.counts = np.zeros(len(self.columns), dtype=np.int64)

    def update(self, value: Any) -> None:
        """Counts one row's missing cells."""
        self.counts += np.asarray(value, dtype=np.int64)

    def fold(self, values: Sequence[Any]) -> None:
        """Counts a block of rows."""
        if values:
            self.counts += _stacked(values).astype(np.int64).sum(axis=0)

    def merge(self, other: MissingCounts) -> MissingCounts:
        """Adds another's counts; returns self."""
        self.counts += other.counts
        return self

    def result(self) -> dict[str, int]:
        """Missing cells per column (every column, 0 included)."""
        return {c: int(n) for c, n in zip(self.columns, self.counts, strict=True)}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The columns and counts."""
        return {"columns": np.array(self.columns, dtype=str), "counts": self.counts.copy()}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> MissingCounts:
        """Restored from :meth:`state_dict`."""
        r = cls([str(c) for c in np.asarray(state["columns"])])
        r.counts = np.array(state["counts"], dtype=np.int64)
        return r


def _stacked(values: Sequence[Any]) -> np.ndarray:
    """A block of tensors (or arrays) as one numpy array, one row per value (a stacked
    column as it is)."""
    if isinstance(values, Stacked):
        data = values.data
        return (data.numpy() if isinstance(data, torch.Tensor) else np.asarray(data)).reshape(len(values), -1)
    if all(isinstance(v, torch.Tensor) for v in values):
        first = values[0].shape
        if all(v.shape == first for v in values):
            return torch.stack(list(values)).reshape(len(values), -1).numpy()
        return torch.stack([v.reshape(-1) for v in values]).numpy()
    return np.stack([np.asarray(v).reshape(-1) for v in values])


@reduce(MissingCounts)
def missing_counts(missing_cells: Collect[torch.Tensor], numeric_columns: Sequence[str],
                   category_columns: Sequence[str] = ()) -> dict[str, int]:
    """Missing cells per column: numbers replaced by the mean, categories given 0."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


# --- labels ----------------------------------------------------------------------------------


def class_names(table: object, label_column: str | None = "label") -> tuple[str, ...] | None:
    """The names of a dataset's ``ClassLabel`` label column, in its order; None otherwise."""
    return None if label_column is None else _class_names(table, label_column)


@vectorized
def label_name(row: pa.RecordBatch, sample_index: np.ndarray, class_names: tuple[str, ...] | None = None,
               label_column: str | None = "label") -> list[str]:
    """The row's label as text (as a category value is written); a ``ClassLabel``'s name.
    A column of strings or integers is read at once, anything else row by row."""
    if label_column is None:
        raise ValueError("label_column is None, so the table has no labels\n"
                         "  fix: name the label column, Builder().with_config({'label_column': ...}), "
                         "or leave 'label' out of the outputs")
    names = label_texts(row, label_column, class_names, empty=False)
    if names is not None:
        return names
    return [_label_name(r, int(i), class_names, label_column) for r, i in
            zip(row.to_pylist(), sample_index, strict=True)]


def _label_name(row: dict[str, Any], sample_index: int, class_names: tuple[str, ...] | None,
                label_column: str) -> str:
    """One row's label (see :func:`label_name`)."""
    row_error(row)
    cell = row[label_column]
    if class_names is not None and isinstance(cell, (int, np.integer)) and 0 <= cell < len(class_names):
        return class_names[int(cell)]
    text = _text(cell)
    if text is None or class_names is not None:
        what = "has no label" if text is None else f"has label {cell!r}, not one of its ClassLabel's classes"
        raise ValueError(f"row {sample_index}, column {label_column!r}: the row {what}\n"
                         "  fix: drop the rows without labels, or skip them with on_error='skip'")
    return text


@reduce(LabelVocabulary)
def label_vocab(label_name: Collect[str], class_names: tuple[str, ...] | None) -> Vocab:
    """The labels, most frequent first (ties in value order, as text); a ``ClassLabel``'s
    names in the dataset's order."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


@vectorized
def label(label_name: Sequence[str], label_vocab: Vocab, sample_index: np.ndarray,
          label_column: str | None = "label") -> list[int]:
    """The label's index in ``label_vocab``; a label not in it (a validation table's class
    the training table lacked) is an error naming the row."""
    ids = label_vocab.ids(label_name)
    for pos, index in enumerate(ids):
        if index < 0:
            _unknown_label(label_name[pos], label_vocab, int(sample_index[pos]), label_column)
    return ids


def _unknown_label(label_name: str, label_vocab: Vocab, sample_index: int, label_column: str | None) -> None:
    """Raises the error of a label that ``label_vocab`` does not hold."""
    known = ", ".join(map(repr, label_vocab.tokens[:10])) + (", ..." if len(label_vocab) > 10 else "")
    raise ValueError(f"row {sample_index}, column {label_column!r}: the label {label_name!r} is not in label_vocab "
                     f"({known})\n  fix: build label_vocab from a table that has every class, or skip such rows "
                     "with on_error='skip'")
