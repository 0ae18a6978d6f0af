"""Reading a ``table`` input (a private helper of the bundled text and tabular modules).

A table is

- a path to a CSV file (``.csv``, ``.tsv``: a header row, then one row per sample) or a
  Parquet file or folder of Parquet files (``.parquet``, or a folder): its named columns
  only are read, a record batch at a time, into an uncompressed Arrow file in a scratch
  folder, and the ``pyarrow.Table`` is memory-mapped from it
  (:func:`flowdata.io.mapped_table`): the rows are never in this process's heap
  (a Parquet file decoded at once would be, with its decoding buffers), DataLoader
  workers share the pages, and pool workers map the same file instead of receiving a copy;
- a ``pyarrow.Table`` or ``RecordBatch``, a pandas ``DataFrame`` or a Hugging Face
  ``datasets.Dataset``, used as it is (its named columns selected, zero-copy).

flowdata indexes each of these by rows (one dict per row, read in batches where the
samples are computed), so a module's source returns the table itself.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from flowdata.io import kind_of, open_regular
from flowdata.errors import InputError

__all__ = ["ROW_ERROR", "bad_rows", "columns_of", "label_texts", "names_of", "read_table", "row_error",
           "table_columns"]


ROW_ERROR = "__flowdata_row_error__"
"""The column a CSV file's table gains when a row of it is bad (a ragged row, an undecodable
cell, a cell that is not of its declared type): that row's error message (None in the other
rows), its cells null. A node that reads the row raises it (:func:`row_error`), so the row
is that sample's error, skipped under ``on_error="skip"``; the rows keep their places."""

BLOCK_SIZE = 1 << 20
"""pyarrow's block: a row longer than this is read again with a block 16 times larger."""


def read_table(table: Any, encoding: str = "utf-8") -> Any:
    """The ``table`` input as a table object: a path opened (all its columns; see
    :func:`table_columns` to read only some), anything else checked and returned."""
    if not isinstance(table, (str, os.PathLike)):
        if columns_of(table) is None:
            raise TypeError(
                f"table: expected a CSV or Parquet path, a pyarrow.Table, a pandas DataFrame or a "
                f"datasets.Dataset, got {type(table).__name__}"
            )
        return table
    return _open(os.fspath(table), None, encoding, None)


def names_of(table: Any, encoding: str = "utf-8") -> list[str]:
    """The column names of the ``table`` input; of a path, from its schema alone (the rows
    are not read; a CSV file's header line is read with ``encoding``)."""
    if not isinstance(table, (str, os.PathLike)):
        return columns_of(read_table(table)) or []
    path = os.fspath(table)
    _exists(path)
    if _is_parquet(path):
        import pyarrow.dataset as ds

        return list(ds.dataset(path, format="parquet").schema.names)
    return _header(path, encoding)


def table_columns(table: Any, columns: list[str], encoding: str = "utf-8",
                  column_types: Mapping[str, str] | None = None) -> Any:
    """The table a module's source returns: ``columns`` of the ``table`` input (see the
    module docstring); a path reads only those. Every column must exist (checked by the
    caller against :func:`columns_of` of :func:`read_table`, or here for a path). A CSV
    file's text is decoded with ``encoding`` and its ``column_types`` (column -> pyarrow
    type name) are read as declared; other tables carry their own types."""
    if not isinstance(table, (str, os.PathLike)):
        if hasattr(table, "select_columns"):  # datasets.Dataset
            return table.select_columns(columns)
        if hasattr(table, "iloc"):  # pandas
            return table[columns]
        return table.select(columns)  # pyarrow Table / RecordBatch
    return _open(os.fspath(table), columns, encoding, column_types)


def row_error(row: Mapping[str, Any]) -> None:
    """Raises the row's error if the reader marked it bad (see :data:`ROW_ERROR`)."""
    message = row.get(ROW_ERROR)
    if message:
        raise ValueError(message)


def bad_rows(batch: Any) -> bool:
    """Whether a record batch of rows holds a bad row of a CSV file (see :data:`ROW_ERROR`):
    a module's columnar node then reads the batch row by row, each bad row its error."""
    names = batch.schema.names
    return ROW_ERROR in names and batch.column(names.index(ROW_ERROR)).null_count < batch.num_rows


def label_texts(batch: Any, column: str, class_names: Sequence[str] | None, empty: bool = True) -> list[str] | None:
    """The labels of a record batch's rows as text, read at once where that is plain: a
    column of strings without a missing cell (nor an empty one, unless ``empty``), of
    integers (as written), or of integers numbering ``class_names``; None for anything else
    (a missing label, another type, a bad row): the caller reads those rows one by one,
    each problem its row's error."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    if column not in names or bad_rows(batch):
        return None
    values = batch.column(names.index(column))
    kind = values.type
    if values.null_count or pa.types.is_boolean(kind):
        return None
    if class_names is not None:
        if not pa.types.is_integer(kind) or not len(values):
            return None
        low, high = pc.min_max(values).values()
        if low.as_py() < 0 or high.as_py() >= len(class_names):
            return None
        return pa.array(class_names, pa.string()).take(values).to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if not empty and pc.any(pc.equal(values, "")).as_py():
            return None
        return values.to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_integer(kind):
        return values.cast(pa.string()).to_pylist()  # type: ignore[no-any-return]
    return None


def _open(path: str, columns: list[str] | None, encoding: str, column_types: Mapping[str, str] | None) -> Any:
    from flowdata.io import mapped_table

    _exists(path)
    if _is_parquet(path):
        import pyarrow.dataset as ds

        data = ds.dataset(path, format="parquet")
        schema = data.schema if columns is None else data.schema.empty_table().select(columns).schema
        return mapped_table(data.to_batches(columns=columns), schema, "parquet")
    return _CsvRead(path, columns, encoding, column_types or {}).table()


def _exists(path: str) -> None:
    """A table path names a file, or a folder (of Parquet files); a FIFO, a socket or a
    device is refused before anything opens it (reading one could wait forever)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"table: {path} does not exist; fix: give the path of a CSV or Parquet file")
    kind = kind_of(os.stat(path).st_mode)
    if kind is not None and kind != "a directory":
        raise InputError(f"table: {path} is {kind}, not a regular file\n"
                         "  fix: give the path of a CSV or Parquet file (or a folder of Parquet files)")


def _is_parquet(path: str) -> bool:
    return os.path.isdir(path) or os.path.splitext(path)[1].lower() in (".parquet", ".pq")


def _delimiter(path: str) -> str:
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".csv", ".tsv", ".txt"):
        raise ValueError(f"table: {path}: unknown kind of file (expected .csv, .tsv or .parquet, or a folder of "
                         "Parquet files)")
    return "\t" if suffix == ".tsv" else ","


def _is_utf8(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name in ("utf-8", "utf-8-sig")
    except LookupError:
        raise InputError(f"table: encoding={encoding!r} is not a text encoding Python knows\n"
                         "  fix: name one, e.g. 'utf-8' (the default), 'latin-1' or 'cp1252'") from None


def _header(path: str, encoding: str) -> list[str]:
    """The CSV file's column names: its first line, read with Python's ``csv`` (pyarrow
    would parse and convert a whole first block to give them)."""
    import csv

    delimiter = _delimiter(path)
    codec = "utf-8-sig" if _is_utf8(encoding) else encoding  # pyarrow skips a UTF-8 byte-order mark too
    try:
        with open_regular(path) as f:  # the first line only: a bad byte in a row is that row's error
            line = f.readline()
        names = next(csv.reader([line.decode(codec)], delimiter=delimiter), None) if line.strip() else None
    except UnicodeDecodeError as exc:
        raise InputError(f"table: {path}: its header line is not {encoding} text ({exc.reason} at byte "
                         f"{exc.start})\n  fix: give the file's encoding, Builder().with_config({{'encoding': "
                         "'latin-1'}) (or what wrote it)") from None
    if names is None:
        raise InputError(f"table: {path} is empty ({os.path.getsize(path)} bytes): a CSV table needs a header line "
                         "and a row per sample\n  fix: give the path of a written table")
    return names


_WIDER = {"null": "double", "int8": "double", "int16": "double", "int32": "double", "int64": "double",
          "uint8": "double", "uint16": "double", "uint32": "double", "uint64": "double", "string": "binary"}
"""What an inferred column becomes when a later block has a cell its type cannot hold: an
integer column a float one, a text column with invalid UTF-8 a binary one (decoded cell by
cell, a bad cell that row's error); any other type (float, bool, dates) a text column."""

_CONVERSION = re.compile(r"In CSV column #(\d+): CSV conversion error to ([^:]+):")
_RAGGED = "CSV parse error: Expected"
_STRADDLING = "straddl"


class _CsvRead:
    """One CSV file read into a memory-mapped table, its column types settled over the whole
    file: pyarrow infers them from the first block; a later block with a cell the inferred
    type cannot hold makes pyarrow fail, naming the column, and the file is read again with
    that column widened (:data:`_WIDER`), until every cell fits. The happy path is pyarrow's
    own streaming reader, unchanged; the slow paths (a widening, a ragged row, a row too
    long for a block) cost one more read each."""

    def __init__(self, path: str, columns: list[str] | None, encoding: str, declared: Mapping[str, str]):
        import pyarrow as pa

        self.path = path
        self.delimiter = _delimiter(path)
        self.encoding = encoding
        self.utf8 = _is_utf8(encoding)
        self.header = _header(path, encoding)
        self.columns = list(columns) if columns is not None else list(self.header)
        twice = sorted({c for c in self.columns if self.header.count(c) > 1})
        if twice:
            named = ", ".join(f"{c!r} {self.header.count(c)} times" for c in twice)
            raise InputError(f"table: {path}: the header names column {named}, so which one is meant is a guess\n"
                             "  fix: rename the columns in the file's header line so that each name is one "
                             "column's")
        self.types: dict[str, Any] = {}  # read by pyarrow as this type
        self.convert: dict[str, Any] = {}  # read as text (or bytes), then converted cell by cell to this
        for column, name in declared.items():
            if column not in self.header:
                raise InputError(f"table: column_types names {column!r}, not a column of {path} (its columns: "
                                 f"{', '.join(map(repr, self.header))})\n  fix: name a column of the file")
            try:
                kind = pa.type_for_alias(str(name))
            except (ValueError, KeyError):
                raise InputError(f"table: column_types[{column!r}] = {name!r}: not a type pyarrow knows\n"
                                 "  fix: 'string', 'int64', 'float64', 'bool', 'date32', 'timestamp[s]'...") from None
            if pa.types.is_string(kind) or pa.types.is_binary(kind):
                self.types[column] = kind
            else:
                self.types[column], self.convert[column] = pa.string(), kind
        self.block_size = BLOCK_SIZE
        self.ragged = False
        self.bad: list[tuple[int, str]] = []  # (data row, error) of the ragged rows, in file order

    def table(self) -> Any:
        """The table, read again after each failure that one change of the reading fixes."""
        import pyarrow as pa

        from flowdata.io import mapped_table

        size = os.path.getsize(self.path)
        while True:
            self.bad = []
            reader = None
            try:
                reader = self._reader()
                for f in reader.schema:  # text pyarrow found not UTF-8 in the first block: decoded cell by cell
                    if self.utf8 and pa.types.is_binary(f.type) and f.name not in self.types:
                        self.convert[f.name] = pa.string()
                schema = self._schema(reader.schema)
                table = mapped_table(self._batches(reader, schema), schema, "csv")
            except pa.ArrowInvalid as exc:
                if not self._widen(str(exc), size):
                    raise InputError(f"table: {self.path}: {exc}\n  fix: correct the file (a cell with the "
                                     "delimiter, a quote or a line break must be quoted)") from None
                continue
            except UnicodeDecodeError as exc:
                raise InputError(f"table: {self.path}: not {self.encoding} text ({exc.reason}: byte "
                                 f"{exc.object[exc.start:exc.start + 1]!r})\n  fix: give the file's encoding, "
                                 "Builder().with_config({'encoding': ...})") from None
            if table.num_rows == 0:
                raise InputError(f"table: {self.path} has a header ({len(self.header)} columns: "
                                 f"{', '.join(map(repr, self.header))}) and no rows: a loader over it would have "
                                 "no sample\n  fix: give a table with rows (was the file cut short?)")
            return table

    def _widen(self, message: str, size: int) -> bool:
        """Changes the reading for what pyarrow failed on; False if nothing would fix it."""
        if _STRADDLING in message and self.block_size <= size:
            self.block_size *= 16
            return True
        if message.startswith(_RAGGED) and not self.ragged:
            self.ragged = True  # rows counted one by one: each ragged row is named and kept in its place
            return True
        found = _CONVERSION.search(message)
        if found is None or int(found.group(1)) >= len(self.header):
            return False
        import pyarrow as pa

        column, kind = self.header[int(found.group(1))], found.group(2)
        if kind == "binary" or column in self.convert:
            return False
        wider = _WIDER.get(kind, "string")
        if wider == "binary" and not self.utf8:
            return False
        self.types[column] = pa.binary() if wider == "binary" else pa.type_for_alias(wider)
        if wider == "binary" and column not in self.convert:
            self.convert[column] = pa.string()  # decoded cell by cell
        return True

    def _reader(self) -> Any:
        import pyarrow.csv as pacsv

        read = pacsv.ReadOptions(block_size=self.block_size, use_threads=not self.ragged,
                                 **({} if self.utf8 else {"encoding": self.encoding}))
        parse = pacsv.ParseOptions(delimiter=self.delimiter,
                                   invalid_row_handler=self._on_ragged if self.ragged else None)
        convert = pacsv.ConvertOptions(include_columns=self.columns, column_types=self.types)
        return pacsv.open_csv(self.path, read_options=read, parse_options=parse, convert_options=convert)

    def _on_ragged(self, invalid: Any) -> str:
        """pyarrow's handler of a row with another number of cells than the header: the row
        is left out of pyarrow's batches and put back in its place by :meth:`_batches`."""
        index = int(invalid.number) - 2 if invalid.number is not None else -1  # number: 1 is the header
        self.bad.append((index, f"row {index} (line {index + 2}): {invalid.actual_columns} cells where the header "
                                f"has {invalid.expected_columns}: {invalid.text!r}\n  fix: correct the row (a cell "
                                "with the delimiter must be quoted), or skip it with on_error='skip'"))
        return "skip"

    def _schema(self, read: Any) -> Any:
        import pyarrow as pa

        fields = [pa.field(f.name, self.convert.get(f.name, f.type)) for f in read]
        if self.ragged or self.convert:
            fields.append(pa.field(ROW_ERROR, pa.string()))
        return pa.schema(fields)

    def _batches(self, reader: Any, schema: Any) -> Iterator[Any]:
        """The reader's batches, ragged rows put back in place (null cells, their error) and
        converted columns converted; as they are when there is neither."""
        import pyarrow as pa

        if not (self.ragged or self.convert):
            yield from reader
            return
        good = done = placed = 0  # pyarrow's rows so far, rows yielded so far, ragged rows placed
        for batch in reader:
            n = batch.num_rows
            # ragged row j, data row d, comes after d - j of pyarrow's rows
            here = [(d - j, msg) for j, (d, msg) in enumerate(self.bad) if j >= placed and d - j <= good + n]
            errors: list[str | None] = [None] * n
            if here:
                take: list[int | None] = list(range(n))
                for after, msg in reversed(here):  # from the last, so that the earlier places hold
                    take.insert(after - good, None)
                    errors.insert(after - good, msg)
                indices = pa.array(take, pa.int64())
                batch = pa.RecordBatch.from_arrays([c.take(indices) for c in batch.columns],
                                                   schema=batch.schema)
                placed += len(here)
            arrays = []
            for field, column in zip(batch.schema, batch.columns, strict=True):
                if field.name in self.convert:
                    column = self._convert(field.name, column, done, errors)
                arrays.append(column)
            arrays.append(pa.array(errors, pa.string()))
            good += n
            done += batch.num_rows
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        rest = self.bad[placed:]
        if rest:
            nulls = [pa.nulls(len(rest), f.type) for f in schema if f.name != ROW_ERROR]
            yield pa.RecordBatch.from_arrays([*nulls, pa.array([m for _, m in rest], pa.string())], schema=schema)

    def _convert(self, column: str, values: Any, first: int, errors: list[str | None]) -> Any:
        """A text (or bytes) column as its declared type (or bytes decoded), in one pyarrow
        call when every cell converts; else cell by cell, a bad cell null and its row's
        error (``first``: the data row of ``values[0]``)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        kind = self.convert[column]
        is_text = pa.types.is_string(kind)
        if not is_text:  # pyarrow's null markers are missing cells, as in a column it typed itself
            values = pc.if_else(pc.is_in(values, value_set=pa.array(_NULLS)), pa.scalar(None, values.type), values)
        try:
            return values.cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        out: list[Any] = []
        for i, cell in enumerate(values.to_pylist()):
            if cell is None:
                out.append(None)
                continue
            try:
                out.append(cell.decode("utf-8") if is_text else pa.array([cell]).cast(kind)[0].as_py())
            except UnicodeDecodeError as exc:
                out.append(None)
                errors[i] = errors[i] or (
                    f"row {first + i} (line {first + i + 2}), column {column!r}: the cell {cell!r} is not utf-8 text "
                    f"({exc.reason} at byte {exc.start})\n  fix: give the file's encoding, Builder().with_config("
                    "{'encoding': 'latin-1'}) (or what wrote it), correct the cell, or skip the row with "
                    "on_error='skip'")
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                out.append(None)
                errors[i] = errors[i] or (
                    f"row {first + i} (line {first + i + 2}), column {column!r}: the cell {cell!r} is not a {kind} "
                    "(column_types)\n  fix: correct the cell, declare the column's type as what it holds, or skip "
                    "the row with on_error='skip'")
        return pa.array(out, kind)


_NULLS = ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "N/A", "NA",
          "NULL", "NaN", "n/a", "nan", "null"]
"""pyarrow's CSV null markers (``ConvertOptions().null_values``)."""


def columns_of(table: Any) -> list[str] | None:
    """The column names of a table, or None if it is not one."""
    names = getattr(table, "column_names", None)  # pyarrow, datasets
    if names is None and hasattr(table, "columns") and hasattr(table, "iloc"):  # pandas
        names = [str(c) for c in table.columns]
    return list(names) if names is not None else None
