"""Fault injection on CSV inputs of the tabular module: each test is named after the fault
it injects. A table is read as data, never as a guess: column types hold for the whole
file, a bad cell or row anywhere is that row's error (named by row, line, column and value,
and skipped under ``on_error="skip"``), and a file that cannot be a table is refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import flowdata as fd
import flowdata_modules.tabular as tabular

PAD = "p" * 1000
"""A column the configuration never names: about 1 KB a row, so that a thousand rows fill
pyarrow's first block (1 MB) and a cell after them is read in a later block."""

AFTER_FIRST_BLOCK = 1500
"""The data row of the injected cell: past the first MB of the file."""


def _driver(**config: Any) -> fd.Driver:
    return fd.Builder().with_modules(tabular).with_config(
        {"numeric_columns": ["a"], "category_columns": ["colour"], **config}).build()


def _write(path: Path, rows: list[bytes], header: bytes = b"a,colour,pad,label") -> str:
    path.write_bytes(header + b"\n" + b"".join(r + b"\n" for r in rows))
    return str(path)


def _rows(n: int, bad_at: int | None = None, bad: bytes = b"") -> list[bytes]:
    rows = [f"{i % 7},k{i % 2},{PAD},{'xy'[i % 2]}".encode() for i in range(n)]
    if bad_at is not None:
        rows[bad_at] = bad
    return rows


def _samples(loader: Any) -> int:
    return sum(len(b["label"]) for b in loader)


def _parsed(dr: fd.Driver, path: str) -> list[float]:
    """Column ``a`` of every delivered row, in order (bad rows skipped)."""
    loader = dr.dataloader(["parsed"], inputs={"table": path}, on_error="skip", batch_size=1000)
    return [float(v[0]) for b in loader for v in b["parsed"]]


def _refused(call: Any, match: str) -> None:
    """``call()`` fails in the source with an InputError whose message matches."""
    with pytest.raises(fd.NodeError, match="node 'row'") as err:
        call()
    assert isinstance(err.value.__cause__, fd.InputError)
    assert re.search(match, str(err.value.__cause__)), str(err.value.__cause__)


def test_csv_latin1_byte_is_that_rows_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", _rows(20, 5, b"5,k\xe9,pad,y"))
    dr = _driver()
    with pytest.raises(fd.SampleError, match=r"row 5 \(line 7\), column 'colour': the cell b'k\\xe9' is not "
                                             r"utf-8 text") as err:
        dr.dataloader(["categories", "label"], inputs={"table": path})
    assert "encoding" in str(err.value.__cause__)  # the fix names the parameter
    loader = dr.dataloader(["categories", "label"], inputs={"table": path}, on_error="skip", batch_size=8)
    assert [s.index for s in loader.report.skipped] == [5]
    assert loader.stats["category_vocabs"]["colour"].tokens == ("k0", "k1")  # text, never "b'k0'"
    assert _samples(loader) == 19
    # The same file with its encoding stated: every row is delivered, the value decoded.
    latin = dr.dataloader(["categories", "label"], inputs={"table": path, "encoding": "latin-1"})
    assert latin.stats["category_vocabs"]["colour"].tokens == ("k0", "k1", "ké")
    assert not latin.report.skipped and _samples(latin) == 20


def test_csv_latin1_byte_after_the_first_block_is_that_rows_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", _rows(2000, AFTER_FIRST_BLOCK, b"5,k\xe9,pad,y"))
    loader = _driver().dataloader(["categories", "label"], inputs={"table": path}, on_error="skip", batch_size=500)
    assert [s.index for s in loader.report.skipped] == [AFTER_FIRST_BLOCK]
    assert "column 'colour'" in loader.report.skipped[0].error
    assert sorted(loader.stats["category_vocabs"]["colour"].tokens) == ["k0", "k1"]
    assert _samples(loader) == 1999


def test_csv_float_in_an_int_column_after_the_first_block(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", _rows(2000, AFTER_FIRST_BLOCK, f"1.5,k0,{PAD},x".encode()))
    stats = _driver().execute(["numeric_stats"], inputs={"table": path})["numeric_stats"]
    assert stats.count.tolist() == [2000]  # the column is a float column, over the whole file
    assert sorted(set(stats.min.tolist() + stats.max.tolist())) == [0.0, 6.0]
    assert _parsed(_driver(), path)[AFTER_FIRST_BLOCK] == 1.5


def test_csv_text_in_an_int_column_after_the_first_block_is_that_rows_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", _rows(2000, AFTER_FIRST_BLOCK, f"oops,k0,{PAD},x".encode()))
    with pytest.raises(fd.SampleError, match=rf"row {AFTER_FIRST_BLOCK}, column 'a': the cell 'oops' is not a number"):
        _driver().execute(["numeric_stats"], inputs={"table": path})
    loader = _driver().dataloader(["numeric", "label"], inputs={"table": path}, on_error="skip", batch_size=500)
    assert [s.index for s in loader.report.skipped] == [AFTER_FIRST_BLOCK]
    assert loader.stats["numeric_stats"].count.tolist() == [1999]
    assert _samples(loader) == 1999


def test_csv_10mb_cell_is_read(tmp_path: Path) -> None:
    big = "w" * (10 << 20)
    path = _write(tmp_path / "t.csv", _rows(3) + [f"3,{big},{PAD},x".encode()] + _rows(3))
    vocab = _driver().execute(["category_vocabs"], inputs={"table": path})["category_vocabs"]["colour"]
    assert sorted(len(t) for t in vocab.tokens) == [2, 2, 10 << 20]


def test_csv_duplicate_column_names_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", _rows(4), header=b"a,colour,a,label")
    _refused(lambda: _driver().dataloader(["numeric", "label"], inputs={"table": path}),
             r"t\.csv: the header names column 'a' 2 times, (.|\n)*fix: rename")


def test_csv_ragged_row_is_that_rows_error(tmp_path: Path) -> None:
    rows = _rows(10)
    rows[3] = b"3,k1,pad,x,surplus"
    rows[6] = b"4,k0"
    path = _write(tmp_path / "t.csv", rows)
    dr = _driver()
    with pytest.raises(fd.SampleError, match=r"row 3 \(line 5\): 5 cells where the header has 4: "
                                             r"'3,k1,pad,x,surplus'"):
        dr.dataloader(["numeric", "label"], inputs={"table": path})
    loader = dr.dataloader(["numeric", "label"], inputs={"table": path}, on_error="skip", batch_size=4)
    assert [s.index for s in loader.report.skipped] == [3, 6]
    assert "line 8" in loader.report.skipped[1].error
    assert loader.stats["numeric_stats"].count.tolist() == [8]
    assert _samples(loader) == 8
    # the good rows keep their places: row 7 is still a = 0
    assert _parsed(dr, path) == [0.0, 1.0, 2.0, 4.0, 5.0, 0.0, 1.0, 2.0]


def test_csv_ragged_row_after_the_first_block_keeps_every_row_in_place(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", _rows(2000, AFTER_FIRST_BLOCK, b"1,k0"))
    loader = _driver().dataloader(["numeric", "label"], inputs={"table": path}, on_error="skip", batch_size=500)
    assert [s.index for s in loader.report.skipped] == [AFTER_FIRST_BLOCK]
    assert f"line {AFTER_FIRST_BLOCK + 2}" in loader.report.skipped[0].error
    assert _parsed(_driver(), path) == [float(i % 7) for i in range(2000) if i != AFTER_FIRST_BLOCK]


def test_csv_header_only_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", [])
    _refused(lambda: _driver().dataloader(["numeric", "label"], inputs={"table": path}),
             r"t\.csv has a header \(4 columns: 'a', 'colour', 'pad', 'label'\) and no rows")


def test_csv_empty_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_bytes(b"")
    _refused(lambda: _driver().dataloader(["numeric", "label"], inputs={"table": str(tmp_path / "t.csv")}),
             r"t\.csv is empty \(0 bytes\)")


def test_csv_declared_type_keeps_leading_zeros(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", [b"1,007,p,x", b"2,010,p,y", b"3,007,p,x"])
    guessed = _driver().execute(["category_vocabs"], inputs={"table": path})["category_vocabs"]["colour"]
    assert guessed.tokens == ("7", "10")  # inferred: a number
    declared = _driver(column_types={"colour": "string"}).execute(["category_vocabs"], inputs={"table": path})
    assert declared["category_vocabs"]["colour"].tokens == ("007", "010")


def test_csv_bad_cell_in_a_declared_column_is_that_rows_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", _rows(2000, AFTER_FIRST_BLOCK, f"1.5,k0,{PAD},x".encode()))
    dr = _driver(column_types={"a": "int64"})
    with pytest.raises(fd.SampleError, match=rf"row {AFTER_FIRST_BLOCK} \(line {AFTER_FIRST_BLOCK + 2}\), column "
                                             r"'a': the cell '1.5' is not a int64 \(column_types\)"):
        dr.dataloader(["numeric", "label"], inputs={"table": path})
    loader = dr.dataloader(["numeric", "label"], inputs={"table": path}, on_error="skip", batch_size=500)
    assert [s.index for s in loader.report.skipped] == [AFTER_FIRST_BLOCK]
    assert _samples(loader) == 1999


def test_csv_declared_type_of_an_unknown_column_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", _rows(3))
    _refused(lambda: _driver(column_types={"zip": "string"}).dataloader(["numeric", "label"], inputs={"table": path}),
             r"column_types names 'zip', not a column of .*t\.csv")
    _refused(lambda: _driver(column_types={"a": "integer"}).dataloader(["numeric", "label"], inputs={"table": path}),
             r"column_types\['a'\] = 'integer': not a type")


# --- the text module reads CSV files the same way ------------------------------------------


def test_text_csv_latin1_byte_and_ragged_row_are_those_rows_errors(tmp_path: Path) -> None:
    import flowdata_modules.text as text

    lines = [f"the word {i % 3},{'ab'[i % 2]}".encode() for i in range(12)]
    lines[4] = b"caf\xe9 noir,a"  # latin-1, not utf-8
    lines[9] = b"one,two,three"  # ragged
    path = _write(tmp_path / "t.csv", lines, header=b"text,label")
    dr = fd.Builder().with_modules(text).build()
    with pytest.raises(fd.SampleError, match=r"row 4 \(line 6\), column 'text': the cell b'caf\\xe9 noir' is not "
                                             r"utf-8 text"):
        dr.dataloader(["token_ids", "label"], inputs={"table": path})
    loader = dr.dataloader(["token_ids", "label"], inputs={"table": path}, on_error="skip", batch_size=4)
    assert sorted(s.index for s in loader.report.skipped) == [4, 9]
    assert sum(len(b["label"]) for b in loader) == 10
    assert "b'" not in " ".join(loader.stats["vocab"].tokens)  # text, never a bytes repr
    latin = dr.dataloader(["token_ids", "label"], inputs={"table": path, "encoding": "latin-1"}, on_error="skip")
    assert [s.index for s in latin.report.skipped] == [9]
    assert "café" in latin.stats["vocab"].tokens
