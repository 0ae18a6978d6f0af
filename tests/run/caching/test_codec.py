"""Cached values come back as they went: every value kind the docs list, read back from the
sample cache with its type, dtype, layout and bits; a kind that cannot is refused when
first written (a skipped sample under ``on_error="skip"``); a value whose class a reader
cannot import is computed again, never taken for damage.

Nodes are in tests/cache_cases/stateful.py; ``stateful.CALLS`` lists what a cached node computed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

import flowdata as fd
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


def same(a: Any, b: Any) -> bool:
    """Equal in type and value (tensors: dtype, layout, shape, values, requires_grad)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if (a.dtype, a.layout, a.shape, a.requires_grad) != (b.dtype, b.layout, b.shape, b.requires_grad):
            return False
        if a.layout != torch.strided:
            return bool(torch.equal(a.to_dense(), b.to_dense()))
        return bool(torch.equal(a.detach().resolve_conj().resolve_neg(), b.detach()))
    if isinstance(a, (np.ndarray, np.generic)):
        return a.dtype == b.dtype and np.shape(a) == np.shape(b) and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("kind", list(stateful.KINDS))
def test_a_cached_value_comes_back_as_it_went(tmp_path: Path, kind: str) -> None:
    dr = driver()
    args: dict[str, Any] = dict(index=1, inputs={"n": 2, "kind": kind}, cache=["value"], cache_dir=tmp_path)
    cold = dr.run_sample(["value"], **args)["value"]
    assert calls() == [f"value {kind}"]
    warm = dr.run_sample(["value"], **args)["value"]
    assert calls() == []  # read back from the cache
    assert same(stateful.KINDS[kind](), cold) and same(cold, warm), (cold, warm)


@pytest.mark.parametrize("kind", list(stateful.REFUSED))
def test_a_value_that_cannot_come_back_as_it_went_is_refused_when_first_written(tmp_path: Path, kind: str) -> None:
    dr = driver()
    said = {"OrderedDict": "is a collections.OrderedDict", "dataclass": "is a tests.cache_cases.stateful.Box",
            "object array": "is a numpy array of Python objects", "quantized tensor": "is a quantized tensor",
            "dict with int keys": "is a dict with keys that are not strings"}[kind]
    with pytest.raises(fd.SampleError, match=rf"node 'value' .*cache=\['value'\] cannot store what 'value' "
                                             rf"returned: value {said}.*; a cached value must come back as it "
                                             r"went.* -- fix: return one of those from 'value'"):
        dr.run_sample(["value"], inputs={"n": 2, "kind": kind}, cache=["value"], cache_dir=tmp_path)


@pytest.mark.parametrize("kind", ["sparse COO tensor", "conjugate tensor", "quantized tensor"])
def test_on_error_skip_with_tensors_that_were_a_bare_runtime_error(tmp_path: Path, kind: str) -> None:
    dr = driver()
    report = fd.Report()
    got = dr.execute(["values"], inputs={"n": 3, "kind": kind}, cache=["value"], cache_dir=tmp_path,
                     on_error="skip", report=report)["values"]
    if kind in stateful.KINDS:  # stored and read back
        assert report.skipped == [] and len(got) == 3
        again = dr.execute(["values"], inputs={"n": 3, "kind": kind}, cache=["value"], cache_dir=tmp_path)["values"]
        assert calls() == [f"value {kind}"] * 3
        assert all(same(a, b) for a, b in zip(got, again, strict=True))
    else:  # refused: each sample skipped, named with the node and the type
        assert len(report.skipped) == 3
        assert all(s.node == "value" and "cannot store what 'value' returned: value is a quantized tensor" in s.error
                   for s in report.skipped)


def test_a_namedtuple_whose_class_is_not_imported_is_computed_again_not_damage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from flowdata.run.caching.codec import encode_value
    from flowdata.run.caching.store import MISS, SampleStore

    writer = SampleStore(str(tmp_path / "node"))
    writer.put("k", encode_value(stateful.Point(1, 2.5)))
    writer.close()
    monkeypatch.delattr(stateful, "Point")  # a reader where the class cannot be found by its name
    reader = SampleStore(str(tmp_path / "node"))
    reader.refresh()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        assert reader.get("k") is MISS  # computed again by the caller
    assert not caplog.records and len(list((tmp_path / "node").glob("*.seg"))) == 1  # not damage: kept
    monkeypatch.undo()
    got = reader.get("k")
    assert type(got) is stateful.Point and got == (1, 2.5)
    reader.close()
