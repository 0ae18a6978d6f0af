"""The bundled tabular module on scikit-learn's bundled tables (no download), through the public API."""

from __future__ import annotations

import logging
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402

import flowdata as fd  # noqa: E402
import flowdata_modules.tabular as tabular  # noqa: E402
from flowdata.stats import Stats  # noqa: E402

OUTPUTS = ["numeric", "categories", "label"]


@pytest.fixture(scope="module")
def wine() -> pd.DataFrame:
    """Wine (178 rows, 13 numeric columns, 3 classes) with two category columns made from it:
    ``band`` (text, 3 values) and ``rings`` (whole numbers, 5 values)."""
    from sklearn.datasets import load_wine

    df = load_wine(as_frame=True).frame
    df["label"] = df.pop("target")
    df["band"] = pd.cut(df["alcohol"], 3, labels=["low", "mid", "high"]).astype(str)
    df["rings"] = (df["magnesium"] // 20).astype("int64")
    return df


def _numeric(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c not in ("label", "band", "rings")]


def _driver(df: pd.DataFrame, **config: Any) -> fd.Driver:
    base = {"numeric_columns": _numeric(df), "category_columns": ["band", "rings"]}
    return fd.Builder().with_modules(tabular).with_config({**base, **config}).build()


def _all(loader: Any) -> dict[str, torch.Tensor]:
    batches = list(loader)
    return {k: torch.cat([b[k] for b in batches]) for k in batches[0]}


@pytest.mark.procs
def test_every_kind_of_table_gives_the_same_tensors(wine: pd.DataFrame, tmp_path: Path) -> None:
    wine.to_csv(tmp_path / "wine.csv", index=False)
    wine.to_parquet(tmp_path / "wine.parquet", index=False)
    tables: dict[str, Any] = {
        "csv": str(tmp_path / "wine.csv"),
        "parquet": tmp_path / "wine.parquet",
        "dataframe": wine,
        "arrow": pa.Table.from_pandas(wine, preserve_index=False),
        "dataset": datasets.Dataset.from_pandas(wine, preserve_index=False),
    }
    dr = _driver(wine)
    runs = [(name, 0) for name in tables] + [("csv", 2), ("dataset", 2)]
    got = {}
    for name, workers in runs:
        loader = dr.dataloader(OUTPUTS, inputs={"table": tables[name]}, batch_size=50, num_workers=workers)
        got[name, workers] = (_all(loader), loader.stats)
    first, stats = got["csv", 0]
    for key, (tensors, other) in got.items():
        assert all(torch.equal(first[k], tensors[k]) for k in OUTPUTS), key
        assert torch.equal(stats["numeric_stats"].var, other["numeric_stats"].var), key
        assert stats["category_vocabs"] == other["category_vocabs"] and stats["label_vocab"] == other["label_vocab"], key

    # numeric: what scikit-learn's StandardScaler (population std) computes
    from sklearn.preprocessing import StandardScaler

    expected = StandardScaler().fit_transform(wine[_numeric(wine)].to_numpy())
    assert first["numeric"].dtype == torch.float32 and first["numeric"].shape == (178, 13)
    assert np.allclose(first["numeric"].numpy(), expected, atol=1e-5)
    # categories: 1 for the most frequent value, ties by value; label: the index in label_vocab
    vocabs = stats["category_vocabs"]
    assert vocabs["band"].tokens == ("mid", "high", "low") and vocabs["band"].counts == (86, 51, 41)
    counts = wine["rings"].value_counts()
    assert list(vocabs["rings"].counts) == sorted(counts.tolist(), reverse=True)
    assert first["categories"].dtype == torch.int64 and first["categories"].shape == (178, 2)
    assert first["categories"][:, 0].tolist() == [vocabs["band"][v] + 1 for v in wine["band"]]
    assert first["categories"][:, 1].tolist() == [vocabs["rings"][str(v)] + 1 for v in wine["rings"]]
    assert stats["label_vocab"].tokens == ("1", "0", "2")  # 71, 59, 48 rows
    assert first["label"].tolist() == [stats["label_vocab"][str(v)] for v in wine["label"]]
    assert stats["missing_counts"] == dict.fromkeys([*_numeric(wine), "band", "rings"], 0)


def _exact_var(values: list[float]) -> Fraction:
    xs = [Fraction(v) for v in values]
    mean = sum(xs, Fraction(0)) / len(xs)
    return sum(((x - mean) ** 2 for x in xs), Fraction(0)) / len(xs)


@pytest.mark.procs
def test_statistics_stay_exact_around_1e9_and_1e15(caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(0)
    n = 1000
    columns = {
        "giga": 1e9 + rng.normal(0.0, 1.0, n),
        "peta": 1e15 + rng.integers(-2, 3, n).astype(np.float64),  # spread about 1.4, ulp 0.125
        "flat": np.full(n, 1e15 + 0.125),
        "tenth": np.full(n, 0.1),
    }
    table = pa.table({**columns, "label": ["a"] * n})
    dr = fd.Builder().with_modules(tabular).with_config({"numeric_columns": list(columns)}).build()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        loader = dr.dataloader(["numeric"], inputs={"table": table}, batch_size=250, num_workers=2)
    stats = loader.stats["numeric_stats"]
    for j, name in enumerate(("giga", "peta")):
        exact = _exact_var(columns[name].tolist())
        assert abs(Fraction(float(stats.var[j])) - exact) / exact <= Fraction(1, 10**9), name
    x = _all(loader)["numeric"].double()
    for j, name in enumerate(("giga", "peta")):
        values = [Fraction(v) for v in columns[name].tolist()]
        mean = sum(values, Fraction(0)) / n
        std = float(_exact_var(columns[name].tolist())) ** 0.5
        want = torch.tensor([float(v - mean) / std for v in values], dtype=torch.float64)
        assert torch.allclose(x[:, j], want, atol=1e-6), name
        assert abs(float(x[:, j].mean())) < 1e-6 and abs(float(x[:, j].std(unbiased=False)) - 1) < 1e-6
    # a constant column (min == max) is exactly 0, whatever rounding the mean had
    assert torch.equal(x[:, 2:], torch.zeros(n, 2, dtype=torch.float64))
    assert "numeric column(s) 'flat', 'tenth' are constant: they normalise to 0" in caplog.text


def test_missing_cells_become_the_mean_and_are_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "gaps.csv"
    path.write_text("a,b,colour,label\n1,10,red,x\n,20,,y\n3,NaN,blue,x\n5,,red,y\n")
    dr = fd.Builder().with_modules(tabular).with_config(
        {"numeric_columns": ["a", "b"], "category_columns": ["colour"]}).build()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        loader = dr.dataloader(OUTPUTS, inputs={"table": str(path)}, batch_size=4, num_workers=0)
    stats = loader.stats["numeric_stats"]
    assert stats.count.tolist() == [3, 2] and stats.mean.tolist() == [3.0, 15.0]  # missing cells left out
    assert loader.stats["missing_counts"] == {"a": 1, "b": 2, "colour": 1}
    assert "missing numeric cells replaced by the column's mean: 'a' 1, 'b' 2" in caplog.text
    batch = next(iter(loader))
    std_a = float(np.std([1.0, 3.0, 5.0]))
    assert torch.allclose(batch["numeric"][:, 0], torch.tensor([-2 / std_a, 0.0, 0.0, 2 / std_a]))
    assert batch["numeric"][1:, 1].tolist() == [1.0, 0.0, 0.0]
    assert batch["categories"][:, 0].tolist() == [1, 0, 2, 1]  # red (2), blue (1); the empty cell is 0


def test_missing_cells_raise_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "gaps.csv"
    path.write_text("a,b,label\n1,10,x\n2,20,y\n3,,x\n")
    dr = fd.Builder().with_modules(tabular).with_config({"numeric_columns": ["a", "b"], "missing": "raise"}).build()
    with pytest.raises(fd.SampleError, match=r"node 'parsed' .* failed on sample 2 .*row 2, column 'b': the cell is "
                                             r"missing \(None\) and missing='raise'") as err:
        dr.dataloader(OUTPUTS[::2], inputs={"table": str(path)}, batch_size=2)
    assert "fix: fill the cell, use missing='mean'" in str(err.value.__cause__)
    loader = dr.dataloader(OUTPUTS[::2], inputs={"table": str(path)}, batch_size=2, on_error="skip")
    assert [s.index for s in loader.report.skipped] == [2] and loader.stats["numeric_stats"].count.tolist() == [2, 2]
    bad = fd.Builder().with_modules(tabular).with_config({"numeric_columns": ["a"], "missing": "drop"}).build()
    with pytest.raises(fd.NodeError, match=r"missing='drop': expected 'mean' .* or 'raise'"):
        bad.execute(["numeric_stats"], inputs={"table": str(path)})


@pytest.mark.procs
def test_text_in_a_numeric_column_names_row_column_and_cell(wine: pd.DataFrame, tmp_path: Path) -> None:
    df = wine.astype({"ash": object})
    df.loc[7, "ash"] = "2,4"  # a decimal comma
    df.loc[9, "ash"] = "inf"
    df.to_csv(tmp_path / "wine.csv", index=False)
    dr = _driver(wine)
    with pytest.raises(fd.SampleError, match=r"failed on sample 7 .*row 7, column 'ash': the cell '2,4' is not a number"):
        dr.execute(["numeric_stats"], inputs={"table": str(tmp_path / "wine.csv")})
    loader = dr.dataloader(OUTPUTS, inputs={"table": str(tmp_path / "wine.csv")}, batch_size=64, num_workers=2,
                           on_error="skip")
    assert [(s.index, s.node) for s in loader.report.skipped] == [(7, "parsed"), (9, "parsed")]
    assert "row 9, column 'ash': the cell 'inf' is not a finite number" in loader.report.skipped[1].error
    assert loader.stats["numeric_stats"].count.tolist() == [176] * 13
    assert sum(len(b["label"]) for b in loader) == 176


def test_an_unknown_column_lists_the_columns_and_the_fix(wine: pd.DataFrame) -> None:
    dr = fd.Builder().with_modules(tabular).with_config(
        {"numeric_columns": ["alcohol", "acidity"], "category_columns": ["band"], "label_column": "class"}).build()
    with pytest.raises(fd.NodeError, match=r"the table has no column 'acidity' \(numeric_columns\), 'class' "
                                           r"\(label_column\); its columns: 'alcohol', 'malic_acid', .*'band', 'rings'"
                                           r" -- fix: name existing columns in the config"):
        dr.execute(["numeric_stats"], inputs={"table": wine})
    one = fd.Builder().with_modules(tabular).with_config({"numeric_columns": "alcohol"}).build()
    with pytest.raises(fd.NodeError, match=r"numeric_columns='alcohol': expected a list of column names"):
        one.execute(["numeric_stats"], inputs={"table": wine})


def test_unknown_and_rare_categories_are_0(wine: pd.DataFrame) -> None:
    train = wine.sample(frac=0.7, random_state=0)
    test = wine.drop(train.index)
    test.loc[test.index[:3], "band"] = ["purple", "", None]
    dr = _driver(wine, min_count=20)
    loader = dr.dataloader(OUTPUTS, inputs={"table": train}, batch_size=40)
    vocabs = loader.stats["category_vocabs"]
    assert all(n >= 20 for v in vocabs.values() for n in v.counts)
    rare = set(train["rings"].astype(str)) - set(vocabs["rings"].tokens)
    assert rare  # some values were seen fewer than 20 times: they are unknown
    seen = _all(loader)["categories"][:, 1]
    assert seen.tolist() == [0 if str(v) in rare else vocabs["rings"][str(v)] + 1 for v in train["rings"]]
    # a validation table is numbered by the training vocabularies and statistics (no pass 1)
    val = dr.dataloader(OUTPUTS, inputs={"table": test, **loader.stats}, batch_size=64)
    assert val.report.seen == {}
    got = _all(val)
    assert got["categories"][:3, 0].tolist() == [0, 0, 0]
    assert got["label"].tolist() == [loader.stats["label_vocab"][str(v)] for v in test["label"]]
    mean, std = loader.stats["numeric_stats"].mean, loader.stats["numeric_stats"].std
    want = (torch.tensor(test[_numeric(wine)].to_numpy()) - mean) / std
    assert torch.allclose(got["numeric"], want.float(), atol=1e-6)


def test_a_class_label_keeps_its_names_and_numbers(wine: pd.DataFrame) -> None:
    ds = datasets.Dataset.from_pandas(wine[["alcohol", "label"]], preserve_index=False)
    ds = ds.cast_column("label", datasets.ClassLabel(names=["barolo", "grignolino", "barbera"]))
    dr = fd.Builder().with_modules(tabular).with_config({"numeric_columns": ["alcohol"]}).build()
    loader = dr.dataloader(["label"], inputs={"table": ds}, batch_size=178)
    assert loader.stats["label_vocab"].tokens == ("barolo", "grignolino", "barbera")
    assert next(iter(loader))["label"].tolist() == wine["label"].tolist()
    unlabelled = fd.Builder().with_modules(tabular).with_config(
        {"numeric_columns": ["alcohol"], "label_column": None}).build()
    with pytest.raises(fd.SampleError, match=r"row 0, column 'label': the label '2' is not in label_vocab \('0', '1'\)"):
        dr.run_sample(["label"], index=0, inputs={"table": wine.iloc[::-1],
                                                 "label_vocab": fd.stats.Vocab(("0", "1"), (5, 5))})
    assert unlabelled.execute(["numeric_stats"], inputs={"table": wine})["numeric_stats"].count.tolist() == [178]


def test_reducer_states_round_trip() -> None:
    vocabs = tabular.CategoryVocabularies(["a", "b"], min_count=2)
    for value in [("x", "1"), ("x", None), ("y", "1"), (None, "2")]:
        vocabs.update(value)
    again = tabular.CategoryVocabularies.from_state_dict(vocabs.state_dict())
    assert again.result() == vocabs.result() == {"a": fd.stats.Vocab(("x",), (2,)), "b": fd.stats.Vocab(("1",), (2,))}
    counts = tabular.MissingCounts(["n"], ["a"])
    counts.fold([torch.tensor([True, False]), torch.tensor([True, True])])
    assert tabular.MissingCounts.from_state_dict(counts.state_dict()).result() == {"n": 2, "a": 1}


def test_a_small_model_learns_breast_cancer() -> None:
    from sklearn.datasets import load_breast_cancer

    df = load_breast_cancer(as_frame=True).frame
    df["label"] = df.pop("target")
    train, test = df.iloc[::2], df.iloc[1::2]
    dr = fd.Builder().with_modules(tabular).with_config({"numeric_columns": list(df.columns[:-1])}).build()
    loader = dr.dataloader(["numeric", "label"], inputs={"table": train}, batch_size=32, shuffle=True, seed=0)
    torch.manual_seed(0)
    model = torch.nn.Linear(30, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(5):
        loader.set_epoch(epoch)
        for batch in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(batch["numeric"]), batch["label"]).backward()
            opt.step()
    val = _all(dr.dataloader(["numeric", "label"], inputs={"table": test, **loader.stats}, batch_size=512))
    accuracy = (model(val["numeric"]).argmax(1) == val["label"]).float().mean()
    assert accuracy > 0.93


def test_the_statistics_come_from_the_pass_cache_the_second_time(tmp_path: Path) -> None:
    table = pa.table({"x": 1e15 + np.arange(200.0), "label": ["a", "b"] * 100})
    dr = fd.Builder().with_modules(tabular).with_config({"numeric_columns": ["x"]}).build()
    first = dr.dataloader(["numeric"], inputs={"table": table}, batch_size=50, cache_dir=tmp_path)
    second = dr.dataloader(["numeric"], inputs={"table": table}, batch_size=50, cache_dir=tmp_path)
    assert first.report.seen == {"row": 200} and second.report.seen == {}
    stats = second.stats["numeric_stats"]
    assert isinstance(stats, Stats) and stats.shift.tolist() == [1e15] and stats.offset.tolist() == [99.5]
    assert torch.equal(_all(first)["numeric"], _all(second)["numeric"])


def test_a_constant_column_is_warned_once_not_by_every_loader(caplog: pytest.LogCaptureFixture) -> None:
    # Once repeated with each loader built over the same data (a validation loader, a
    # second run in a notebook). Once per process for a column and its
    # value; the same column constant at another value is news, and warned.
    table = pa.table({"steady": [4.25] * 6, "moving": [float(i) for i in range(6)], "label": ["a", "b"] * 3})
    dr = fd.Builder().with_modules(tabular).with_config({"numeric_columns": ["steady", "moving"]}).build()
    warning = "numeric column(s) 'steady' are constant: they normalise to 0"
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        for _ in range(3):
            dr.dataloader(["numeric"], inputs={"table": table}, batch_size=3)
    assert caplog.text.count(warning) == 1
    caplog.clear()
    other = pa.table({"steady": [7.5] * 6, "moving": [float(i) for i in range(6)], "label": ["a", "b"] * 3})
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        dr.dataloader(["numeric"], inputs={"table": other}, batch_size=3)
        dr.dataloader(["numeric"], inputs={"table": other}, batch_size=3)
    assert caplog.text.count(warning) == 1


def test_columns_are_read_without_a_dict_per_row_and_the_cell_by_cell_path_agrees(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 5000
    rng = np.random.default_rng(5)
    x = rng.normal(1e6, 3.0, n)
    x[rng.random(n) < 0.05] = np.nan
    colour = rng.choice(["red", "blue", "", "green"], n).astype(object)
    size = rng.integers(0, 4, n)
    plain = pa.table({"x": pa.array(x, from_pandas=True), "colour": colour.tolist(), "size": size,
                      "label": rng.choice(["a", "b"], n).tolist()})
    # The same cells in forms that are read cell by cell: numbers as text with one cell Arrow
    # cannot parse ("1_000", which Python reads as 1000), whole numbers as floats.
    texts = [("" if np.isnan(v) else repr(float(v))) for v in x]
    odd = plain.set_column(0, "x", pa.array(texts)).set_column(2, "size", pa.array(size.astype(np.float64)))
    dr = fd.Builder().with_modules(tabular).with_config(
        {"numeric_columns": ["x"], "category_columns": ["colour", "size"]}).build()

    from flowdata.columns import ArrowRows

    made = []
    split = ArrowRows._split

    def counted(self: ArrowRows) -> list[Any]:
        made.append(len(self))
        return split(self)

    with monkeypatch.context() as m:
        m.setattr(ArrowRows, "_split", counted)
        fast = dr.dataloader(OUTPUTS, inputs={"table": plain}, batch_size=64, shuffle=True, seed=1)
        columnar = _all(fast)
    # rows made into dicts: only the values of the statistics pass's first blocks, which its
    # first small chunks cut (folded in the main process), never an epoch's
    assert sum(made) <= 2 * 64, made
    slow = dr.dataloader(OUTPUTS, inputs={"table": odd}, batch_size=64, shuffle=True, seed=1)
    by_cell = _all(slow)
    for k in OUTPUTS:
        assert torch.equal(columnar[k], by_cell[k]), k
    assert fast.stats["category_vocabs"] == slow.stats["category_vocabs"]
    for field in ("mean", "var", "count", "min", "max"):
        assert torch.equal(getattr(fast.stats["numeric_stats"], field), getattr(slow.stats["numeric_stats"], field))
    texts[17] = "1_000"
    got = dr.execute(["numeric_stats"], inputs={"table": plain.set_column(0, "x", pa.array(texts))})["numeric_stats"]
    assert got.min.item() == 1000.0  # read as Python reads it: the chunk of row 17 cell by cell
