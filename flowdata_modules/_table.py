"""Reading a ``table`` input (a private helper of the bundled text and tabular modules).

A table is

- a path to a CSV file (``.csv``, ``.tsv``: a header row, then one row per sample) or a
  Parquet file or folder of Parquet files (``.parquet``, or a folder): its named columns
  only are read, a record batch at a time, into an uncompressed Arrow file in a scratch
  folder, and the ``pyarrow.Table`` is memory-mapped from it
  (:func:`flowdata.run.source.mapped_table`): the rows are never in this process's heap
  (a Parquet file decoded at once would be, with its decoding buffers), DataLoader
  workers share the pages, and pool workers map the same file instead of receiving a copy;
- a ``pyarrow.Table`` or ``RecordBatch``, a pandas ``DataFrame`` or a Hugging Face
  ``datasets.Dataset``, used as it is (its named columns selected, zero-copy).

flowdata indexes each of these by rows (one dict per row, read in batches where the
samples are computed), so a module's source returns the table itself.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["columns_of", "names_of", "read_table", "table_columns"]


def read_table(table: Any) -> Any:
    """The ``table`` input as a table object: a path opened (all its columns; see
    :func:`table_columns` to read only some), anything else checked and returned."""
    if not isinstance(table, (str, os.PathLike)):
        if columns_of(table) is None:
            raise TypeError(
                f"table: expected a CSV or Parquet path, a pyarrow.Table, a pandas DataFrame or a "
                f"datasets.Dataset, got {type(table).__name__}"
            )
        return table
    return _open(os.fspath(table), None)


def names_of(table: Any) -> list[str]:
    """The column names of the ``table`` input; of a path, from its schema alone (the rows
    are not read)."""
    if not isinstance(table, (str, os.PathLike)):
        return columns_of(read_table(table)) or []
    path = os.fspath(table)
    _exists(path)
    if _is_parquet(path):
        import pyarrow.dataset as ds

        return list(ds.dataset(path, format="parquet").schema.names)
    return list(_csv(path, None).schema.names)


def table_columns(table: Any, columns: list[str]) -> Any:
    """The table a module's source returns: ``columns`` of the ``table`` input (see the
    module docstring); a path reads only those. Every column must exist (checked by the
    caller against :func:`columns_of` of :func:`read_table`, or here for a path)."""
    if not isinstance(table, (str, os.PathLike)):
        if hasattr(table, "select_columns"):  # datasets.Dataset
            return table.select_columns(columns)
        if hasattr(table, "iloc"):  # pandas
            return table[columns]
        return table.select(columns)  # pyarrow Table / RecordBatch
    return _open(os.fspath(table), columns)


def _open(path: str, columns: list[str] | None) -> Any:
    from flowdata.run.source import mapped_table

    _exists(path)
    if _is_parquet(path):
        import pyarrow.dataset as ds

        data = ds.dataset(path, format="parquet")
        schema = data.schema if columns is None else data.schema.empty_table().select(columns).schema
        return mapped_table(data.to_batches(columns=columns), schema, "parquet")
    reader = _csv(path, columns)
    return mapped_table(reader, reader.schema, "csv")


def _exists(path: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError(f"table: {path} does not exist; fix: give the path of a CSV or Parquet file")


def _is_parquet(path: str) -> bool:
    return os.path.isdir(path) or os.path.splitext(path)[1].lower() in (".parquet", ".pq")


def _csv(path: str, columns: list[str] | None) -> Any:
    """A streaming reader of a CSV file (its schema from the first block)."""
    import pyarrow.csv as pacsv

    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".csv", ".tsv", ".txt"):
        raise ValueError(f"table: {path}: unknown kind of file (expected .csv, .tsv or .parquet, or a folder of "
                         "Parquet files)")
    options = pacsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
    convert = pacsv.ConvertOptions(include_columns=columns) if columns is not None else None
    return pacsv.open_csv(path, parse_options=options, convert_options=convert)


def columns_of(table: Any) -> list[str] | None:
    """The column names of a table, or None if it is not one."""
    names = getattr(table, "column_names", None)  # pyarrow, datasets
    if names is None and hasattr(table, "columns") and hasattr(table, "iloc"):  # pandas
        names = [str(c) for c in table.columns]
    return list(names) if names is not None else None
