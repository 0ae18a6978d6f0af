"""Reading a ``table`` input (a private helper of the bundled text and tabular modules).

A table is

- a path to a CSV file (``.csv``, ``.tsv``: a header row, then one row per sample) or a
  Parquet file or folder of Parquet files (``.parquet``, or a folder), read into a
  ``pyarrow.Table`` (Parquet memory-mapped: the rows are not copied into this process's
  memory, and forked DataLoader workers share the pages);
- a ``pyarrow.Table`` or ``RecordBatch``, a pandas ``DataFrame`` or a Hugging Face
  ``datasets.Dataset``, used as it is.

flowdata indexes each of these by rows (one dict per row, read in batches where the
samples are computed), so a module's source returns the table itself.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["columns_of", "read_table"]


def read_table(table: Any) -> Any:
    """The table a module's source returns for the ``table`` input (see the module docstring)."""
    if not isinstance(table, (str, os.PathLike)):
        if columns_of(table) is None:
            raise TypeError(
                f"table: expected a CSV or Parquet path, a pyarrow.Table, a pandas DataFrame or a "
                f"datasets.Dataset, got {type(table).__name__}"
            )
        return table
    path = os.fspath(table)
    if not os.path.exists(path):
        raise FileNotFoundError(f"table: {path} does not exist; fix: give the path of a CSV or Parquet file")
    suffix = os.path.splitext(path)[1].lower()
    if os.path.isdir(path) or suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return pq.read_table(path, memory_map=True)
    if suffix in (".csv", ".tsv", ".txt"):
        import pyarrow.csv as pacsv

        options = pacsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
        return pacsv.read_csv(path, parse_options=options)
    raise ValueError(f"table: {path}: unknown kind of file (expected .csv, .tsv or .parquet, or a folder of "
                     "Parquet files)")


def columns_of(table: Any) -> list[str] | None:
    """The column names of a table, or None if it is not one."""
    names = getattr(table, "column_names", None)  # pyarrow, datasets
    if names is None and hasattr(table, "columns") and hasattr(table, "iloc"):  # pandas
        names = [str(c) for c in table.columns]
    return list(names) if names is not None else None
