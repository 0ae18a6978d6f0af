"""Cache keys that see the state of what a node reaches -- a reducer's result it reads,
weights loaded from a file, module-level arrays and objects changed in place, an edited
helper behind ``functools.cache``, the same key in another process -- and what a key cannot
see (an open handle): refused by ``cache=``, warned of once by the pass cache. The sample
cache (``cache=``) and the pass cache (``cache_dir=`` alone) alike, through the public API.

Nodes are in tests/cache_cases/stateful.py; ``stateful.CALLS`` lists what a cached node computed.
"""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

import flowdata as fd
import flowdata_modules.tabular as tabular
import flowdata_modules.text as text
from flowdata.stats import Stats, Vocab
from tests.cache_cases import stateful

N = 6


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """The module's objects as they start (each test may change them)."""
    def reset() -> None:
        with torch.no_grad():
            stateful.ENCODER.weight.fill_(1.0)
        stateful.OFFSET.zero_()
        stateful.TABLE[:] = 0
        stateful.SCALER.gain = 1.0
        stateful.OPTIONS.shift = 0.0
        stateful.CALLS.clear()

    reset()
    yield
    reset()


def calls() -> list[str]:
    """What the cached nodes computed since the last look (and forgets it)."""
    got = list(stateful.CALLS)
    stateful.CALLS.clear()
    return got


def driver(module: ModuleType = stateful, **config: Any) -> fd.Driver:
    return fd.Builder().with_modules(module).with_config(config).build()


# --- caching a node that reads a Vocab (a reducer's result) -----------------------------------


def test_sample_cache_of_a_node_reading_a_vocab_hits_and_gives_the_same_ids(tmp_path: Path) -> None:
    dr = driver()
    want = [b["word_id"].tolist() for b in dr.dataloader(["word_id"], inputs={"n": N}, batch_size=4)]
    calls()
    loader = dr.dataloader(["word_id"], inputs={"n": N}, batch_size=4, cache=["word_id"], cache_dir=tmp_path)
    assert [b["word_id"].tolist() for b in loader] == want and len(calls()) == N
    again = dr.dataloader(["word_id"], inputs={"n": N}, batch_size=4, cache=["word_id"], cache_dir=tmp_path)
    assert [b["word_id"].tolist() for b in again] == want
    assert calls() == [] and again.report.cache["word_id"]["hits"] == N
    # run_sample reads the same entries
    assert dr.run_sample(["word_id"], index=3, inputs={"n": N}, cache=["word_id"], cache_dir=tmp_path) == {
        "word_id": want[0][3]}
    assert calls() == []


def test_sample_cache_with_a_vocab_given_as_input_misses_when_the_vocab_differs(tmp_path: Path) -> None:
    dr = driver()
    args: dict[str, Any] = dict(batch_size=N, cache=["word_id"], cache_dir=tmp_path)
    one = Vocab(("a", "b", "c"), (3, 2, 1))
    other = Vocab(("c", "b", "a"), (3, 2, 1))
    assert next(iter(dr.dataloader(["word_id"], inputs={"n": N, "vocab": one}, **args)))["word_id"].tolist() == \
        [0, 1, 1, 2, 2, 2]
    calls()
    assert next(iter(dr.dataloader(["word_id"], inputs={"n": N, "vocab": other}, **args)))["word_id"].tolist() == \
        [2, 1, 1, 0, 0, 0]
    assert len(calls()) == N


def test_text_module_with_cache_ids_as_docs_text_says(tmp_path: Path) -> None:
    table = pa.table({"text": ["The cat sat.", "the dog, the cat!", "Zebra zebra", "a cat"],
                      "label": ["pet", "pet", "wild", "pet"]})
    dr = fd.Builder().with_modules(text).with_config({"max_length": 5}).build()
    outputs = ["token_ids", "attention_mask", "label"]
    want = list(dr.dataloader(outputs, inputs={"table": table}, batch_size=3))
    for round_ in range(2):
        loader = dr.dataloader(outputs, inputs={"table": table}, batch_size=3, cache=["ids", "label"],
                               cache_dir=tmp_path)
        got = list(loader)
        assert all(torch.equal(a[k], b[k]) for a, b in zip(want, got, strict=True) for k in outputs)
        assert loader.report.cache["ids"]["hits"] == (4 if round_ else 0)


def test_tabular_module_with_cache_categories_and_label(tmp_path: Path) -> None:
    table = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0, 5.0], "band": ["lo", "hi", "lo", None, "mid"],
                          "label": ["a", "b", "a", "a", "b"]})
    dr = fd.Builder().with_modules(tabular).with_config(
        {"numeric_columns": ["x"], "category_columns": ["band"]}).build()
    outputs = ["numeric", "categories", "label"]
    want = next(iter(dr.dataloader(outputs, inputs={"table": table}, batch_size=5)))
    for round_ in range(2):
        loader = dr.dataloader(outputs, inputs={"table": table}, batch_size=5, cache=["categories", "label"],
                               cache_dir=tmp_path)
        got = next(iter(loader))
        assert all(torch.equal(want[k], got[k]) for k in outputs)
        assert loader.report.cache["categories"]["hits"] == (5 if round_ else 0)
        assert loader.report.cache["label"]["hits"] == (5 if round_ else 0)


# --- mutation: each kind of state a node reaches, changed in turn, misses ---------------------


def _load_weights(path: Path, w: float) -> None:
    torch.save({"weight": torch.full((1, 1), w)}, path)
    stateful.ENCODER.load_state_dict(torch.load(path))


MUTATIONS: list[tuple[str, Callable[[Path], None]]] = [
    ("torch module weights loaded from a file", lambda p: _load_weights(p / "w.pt", 5.0)),
    ("a module-level tensor changed in place", lambda p: stateful.OFFSET.add_(2.0)),
    ("a module-level numpy array changed in place", lambda p: stateful.TABLE.__setitem__(slice(None), 3.0)),
    ("an attribute of an instance the node calls", lambda p: setattr(stateful.SCALER, "gain", 4.0)),
    ("a field of a module-level dataclass", lambda p: setattr(stateful.OPTIONS, "shift", 1.5)),
]


def _truth(dr: fd.Driver) -> tuple[list[float], float]:
    """The values and their mean, computed without any cache."""
    values = [float(dr.run_sample(["code"], index=i, inputs={"n": N})["code"]) for i in range(N)]
    calls()
    return values, sum(values) / N


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_change_of_state_misses_in_the_sample_cache_and_the_pass_cache(
        tmp_path: Path, mutation: tuple[str, Callable[[Path], None]]) -> None:
    what, mutate = mutation
    dr = driver()
    samples, passes = tmp_path / "samples", tmp_path / "passes"

    def epoch() -> list[float]:
        loader = dr.dataloader(["code"], inputs={"n": N}, batch_size=N, cache=["code"], cache_dir=samples)
        return next(iter(loader))["code"].flatten().tolist()

    def mean() -> float:
        return float(dr.execute(["code_stats"], inputs={"n": N}, cache_dir=passes)["code_stats"].mean)

    values, average = _truth(dr)
    assert epoch() == values and mean() == pytest.approx(average)
    calls()
    assert epoch() == values and mean() == pytest.approx(average)
    assert calls() == []  # nothing changed: both caches hit
    mutate(tmp_path)
    values, average = _truth(dr)
    assert epoch() == values, what
    assert mean() == pytest.approx(average), what
    assert len(calls()) == 2 * N, what  # the sample cache missed, and so did the pass cache


def test_an_encoder_reloaded_with_new_weights_gives_the_new_values(tmp_path: Path) -> None:
    dr = driver()
    got = []
    for w in (1.0, 5.0):
        _load_weights(tmp_path / "w.pt", w)
        loader = dr.dataloader(["code"], inputs={"n": 3}, batch_size=3, cache=["code"], cache_dir=tmp_path)
        got.append((next(iter(loader))["code"].flatten().tolist(), loader.report.cache["code"]["hits"],
                    float(dr.execute(["code_stats"], inputs={"n": 3}, cache_dir=tmp_path)["code_stats"].mean)))
    assert got == [([0.0, 1.0, 2.0], 0, 1.0), ([0.0, 5.0, 10.0], 0, 5.0)]


def test_a_stats_input_that_differs_misses_downstream(tmp_path: Path) -> None:
    dr = driver()
    args: dict[str, Any] = dict(batch_size=N, cache=["centred"], cache_dir=tmp_path)
    for shift in (1.0, 2.0):
        stats = Stats(mean=torch.tensor([shift]), std=torch.ones(1), var=torch.ones(1), min=torch.zeros(1),
                      max=torch.ones(1), count=torch.tensor([N]))
        got = next(iter(dr.dataloader(["centred"], inputs={"n": N, "code_stats": stats}, **args)))["centred"]
        assert got.flatten().tolist() == [i - shift for i in range(N)]
        assert calls().count("centred") == N


HELPERS = '''
import functools

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford


def x(n: int) -> Parallel[float]:
    yield from (float(i) for i in range(n))


@functools.lru_cache(maxsize=None)
def _gain() -> float:
    return 1.0


@functools.cache
def _shift(v: float) -> float:
    return v + 0.0


def y(x: float) -> float:
    return _shift(x) * _gain()


@reduce(Welford)
def y_stats(y: Collect[float]) -> Stats:
    ...
'''


@pytest.fixture()
def helpers(tmp_path: Path) -> Iterator[Callable[[str, str], ModuleType]]:
    """A module ``edited_helpers`` in a folder of its own: edited, then imported afresh."""
    folder = tmp_path / "code"
    folder.mkdir()
    path = folder / "edited_helpers.py"
    path.write_text(HELPERS)
    sys.path.insert(0, str(folder))

    def edit(old: str, new: str) -> ModuleType:
        if old:
            assert old in path.read_text()
            path.write_text(path.read_text().replace(old, new, 1))
        sys.modules.pop("edited_helpers", None)
        importlib.invalidate_caches()
        return importlib.import_module("edited_helpers")

    yield edit
    sys.path.remove(str(folder))
    sys.modules.pop("edited_helpers", None)


@pytest.mark.parametrize("edit", [("return 1.0", "return 5.0"), ("return v + 0.0", "return v + 5.0")],
                         ids=["functools.lru_cache", "functools.cache"])
def test_an_edited_helper_behind_a_functools_cache_misses(
        tmp_path: Path, helpers: Callable[[str, str], ModuleType], edit: tuple[str, str]) -> None:
    def run(module: ModuleType) -> tuple[list[float], int, float]:
        dr = driver(module)
        loader = dr.dataloader(["y"], inputs={"n": 4}, batch_size=4, cache=["y"], cache_dir=tmp_path / "s")
        values = next(iter(loader))["y"].tolist()
        stats = dr.execute(["y_stats"], inputs={"n": 4}, cache_dir=tmp_path / "p")["y_stats"]
        return values, loader.report.cache["y"]["hits"], float(stats.mean)

    first = run(helpers("", ""))
    assert run(helpers("", "")) == (first[0], 4, first[2])  # unchanged: a hit
    got = run(helpers(*edit))
    assert got[1] == 0 and got[0] != first[0] and got[2] != first[2]
    assert got[2] == pytest.approx(sum(got[0]) / 4)


@pytest.mark.procs
def test_keys_of_state_are_the_same_in_another_process() -> None:
    code = ("from flowdata.run.caching.fingerprint import digest; from tests.cache_cases import stateful; "
            "from flowdata.stats import Vocab; import torch; "
            "print(digest([stateful.SCALER, stateful.OPTIONS, Vocab(('a', 'b'), (2, 1)), {'b', 'a', 'c'}, "
            "torch.ones(2).to_sparse(), stateful.ENCODER.weight.detach().fill_(1)]))")
    from flowdata.run.caching.fingerprint import digest

    want = digest([stateful.SCALER, stateful.OPTIONS, Vocab(("a", "b"), (2, 1)), {"b", "a", "c"},
                   torch.ones(2).to_sparse(), stateful.ENCODER.weight.detach()])
    root = Path(__file__).resolve().parents[3]
    other = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                            env={"PYTHONHASHSEED": str(seed), "PYTHONPATH": str(root), "PATH": ""}).stdout.strip()
             for seed in (1, 2)]
    assert other == [want, want]


# --- what the key cannot see: refused by cache=, warned of once by the pass cache -------------


def test_a_node_reaching_an_open_handle_is_refused_by_cache(tmp_path: Path) -> None:
    dr = driver()
    with pytest.raises(fd.InputError, match=r"cache=\['logged'\]: the key of 'logged' \(.*stateful.py:\d+\) cannot "
                                            r"see tests.cache_cases.stateful.LOG \(a _io.TextIOWrapper, whose state "
                                            r"cannot be read\), which _peek \(stateful.py:\d+\) reads: a cached value "
                                            r"would go stale when it changes\n  fix: create the object inside the node"):
        dr.dataloader(["logged"], inputs={"n": N}, cache=["logged"], cache_dir=tmp_path)
    with pytest.raises(fd.InputError, match=r"cache=\['logged'\]: the key of 'logged'"):
        dr.run_sample(["logged"], inputs={"n": N}, cache=["logged"], cache_dir=tmp_path)
    # downstream of a statistics pass, and upstream of the cached node: refused before the pass runs
    with pytest.raises(fd.InputError, match=r"cache=\['late'\]: the key of 'late' .* cannot see "
                                            r"tests.cache_cases.stateful.LOG .*\(upstream, through 'logged'"):
        dr.dataloader(["late"], inputs={"n": N}, cache=["late"], cache_dir=tmp_path)
    assert calls() == []
    with pytest.raises(fd.InputError, match=r"cache=\['tagged'\]: the key of 'tagged' .* cannot see the value of "
                                            r"'tag'\[1\] \(a _thread.lock, whose state cannot be read\)"):
        dr.run_sample(["tagged"], inputs={"n": N, "tag": ["ok", threading.Lock()]}, cache=["tagged"],
                      cache_dir=tmp_path)
    with pytest.raises(fd.InputError, match=r"cache=\['tagged'\]: the key of a sample cannot see its item "
                                            r"\(a _thread.lock, whose state cannot be read\)"):
        dr.run_sample(["tagged"], item=threading.Lock(), inputs={"n": N, "tag": 1}, cache=["tagged"],
                      cache_dir=tmp_path)


def test_the_pass_cache_warns_once_and_computes_when_its_key_cannot_see(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dr = driver()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        means = [float(dr.execute(["logged_stats"], inputs={"n": N}, cache_dir=tmp_path)["logged_stats"].mean)
                 for _ in range(3)]
    assert means == [2.5] * 3
    warned = [r.getMessage() for r in caplog.records if "is not cached" in r.getMessage()]
    assert len(warned) == 1, warned
    assert warned[0].startswith("pass 1 of group 'x' is not cached: its key cannot see tests.cache_cases.stateful.LOG "
                                "(a _io.TextIOWrapper, whose state cannot be read), which _peek (stateful.py:")
    assert not list(tmp_path.glob("pass-*"))  # nothing stored that could go stale


# --- fidelity: every value kind the docs list comes back as it went ---------------------------


