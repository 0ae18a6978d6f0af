"""Reproducers of defects found reviewing the one-engine change: each failed before its fix."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import flowdata as fd

USES = """
import functools
from collections.abc import Iterator

import numpy as np
from hamilton.function_modifiers import does
from flowdata import Collect, Parallel

def x(count: int) -> Parallel[float]:
    yield from (float(i) for i in range(count))

def np_all_positive(x: Collect[float]) -> bool:
    return bool(np.all(x))

def np_total(x: Collect[float]) -> float:
    return float(np.sum(x))

def backwards(x: Collect[float]) -> list[float]:
    return list(reversed(x))

def doubled(x: Collect[float]) -> Iterator[float]:
    for v in x:
        yield v * 2

def _keep(x: list[float]) -> list[float]:
    return list(x)

@does(_keep)
def kept(x: Collect[float]) -> list[float]:
    pass

def _retry(fn):
    @functools.wraps(fn)
    def wrapper(**kwargs):
        try:
            return fn(**kwargs)
        except ZeroDivisionError:
            return fn(**kwargs)
    return wrapper

CALLS = []

@_retry
def retried(x: Collect[float]) -> float:
    CALLS.append(1)
    total = sum(x)
    if len(CALLS) == 1:
        raise ZeroDivisionError("first try")
    return total
"""


def test_collect_arguments_judged_by_what_really_runs(build: Callable[..., fd.Driver]) -> None:
    dr = build(USES)
    got = dr.execute(["np_all_positive", "np_total", "backwards", "doubled", "kept", "retried"], inputs={"count": 5})
    assert got["np_all_positive"] is False  # np.all of a stream object was truthy
    assert got["np_total"] == 10.0
    assert got["backwards"] == [4.0, 3.0, 2.0, 1.0, 0.0]
    assert list(got["doubled"]) == [0.0, 2.0, 4.0, 6.0, 8.0]  # a generator runs after the call
    assert got["kept"] == [0.0, 1.0, 2.0, 3.0, 4.0]  # @does: the body that runs is not the source's
    assert got["retried"] == 10.0  # a decorator may call the body twice


RNG = """
import torch
from flowdata import Collect, {kind}

def s(n: int) -> {kind}[int]:
    yield from range(n)

def a(s: int, sample_rng: torch.Generator) -> float:
    return float(torch.rand(1, generator=sample_rng))

def b(a: float, sample_rng: torch.Generator) -> tuple[float, float]:
    return a, float(torch.rand(1, generator=sample_rng))

def pairs(b: Collect[tuple[float, float]]) -> list[tuple[float, float]]:
    return list(b)
"""


def test_sequential_nodes_share_one_sample_rng(build: Callable[..., fd.Driver]) -> None:
    seq = build(RNG.format(kind="Sequential"))
    par = build(RNG.format(kind="Parallel"))
    got = seq.execute(["pairs"], inputs={"n": 4})["pairs"]
    assert got == par.execute(["pairs"], inputs={"n": 4})["pairs"]
    assert all(x != y for x, y in got)  # one generator, drawn from twice
    batches = seq.dataloader(["b"], inputs={"n": 4}, batch_size=4)  # Sequential: streamed, in workers' kernel
    streamed = [(float(x), float(y)) for batch in batches for x, y in zip(*batch["b"], strict=True)]
    assert streamed == got


UNPICKLABLE = """
import threading
from flowdata import Collect, Parallel

class Held:
    def __init__(self, i):
        self.i, self.lock = i, threading.Lock()

def item(n: int) -> Parallel[Held]:
    yield from (Held(i) for i in range(n))

def value(item: Held) -> int:
    return item.i

def total(value: Collect[int]) -> int:
    return sum(value)
"""

RUN_UNPICKLABLE = """
import sys
sys.path.insert(0, sys.argv[1])
import flowdata as fd
import unpicklable_flow

dr = fd.Builder().with_modules(unpicklable_flow).build()
try:
    dr.execute(["total"], inputs={"n": 20}, executor="processes")
except fd.FlowdataError as exc:
    print(type(exc).__name__, str(exc).splitlines()[0])
"""


def test_unpicklable_items_are_an_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "unpicklable_flow.py").write_text(textwrap.dedent(UNPICKLABLE))
    (tmp_path / "run.py").write_text(RUN_UNPICKLABLE)
    done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        "FlowdataError a task cannot be sent to worker processes: TypeError: cannot pickle '_thread.lock' object")


FILES = """
from flowdata import Parallel

class Files:
    def __init__(self, n):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if i == 3:
            raise FileNotFoundError(f"clip_{i}.wav")
        if i >= self.n:
            raise IndexError(i)
        return f"clip_{i}.wav"

def item(count: int) -> Parallel[str]:
    return Files(count)

def size(item: str) -> int:
    return len(item)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_an_index_that_raises_is_the_sources_error(build: Callable[..., fd.Driver], workers: int) -> None:
    dr = build(FILES)
    loader = dr.dataloader(["size"], inputs={"count": 8}, batch_size=4, num_workers=workers)
    with pytest.raises(fd.NodeError, match=r"node 'item' \(.*:16\) failed: FileNotFoundError: clip_3.wav \(while producing sample 3\)"):
        list(loader)


REDUCER = """
from flowdata import Collect, Parallel, reduce

class Scaled:
    def __init__(self, scale: float):
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.scale, self.total = scale, 0.0
    def update(self, v):
        self.total += v * self.scale
    def merge(self, other):
        self.total += other.total
        return self
    def result(self) -> float:
        return self.total

def x(n: int) -> Parallel[float]:
    yield from (float(i) for i in range(n))

@reduce(Scaled)
def scaled(x: Collect[float], scale: float) -> float: ...
"""


def test_a_reducer_that_refuses_its_options_names_the_node(build: Callable[..., fd.Driver]) -> None:
    dr = build(REDUCER)
    assert dr.execute(["scaled"], inputs={"n": 4, "scale": 2.0}) == {"scaled": 12.0}
    with pytest.raises(fd.NodeError, match=r"node 'scaled' \(.*:20\) failed: ValueError: scale must be positive, got -1.0"):
        dr.execute(["scaled"], inputs={"n": 4, "scale": -1.0})


EARLY = """
from flowdata import Collect, {kind}

PULLED = []

def s(n: int) -> {kind}[int]:
    for i in range(n):
        PULLED.append(i)
        yield i

def x(s: int) -> int:
    return s

def first_big(x: Collect[int]) -> int:
    for v in x:
        if v >= 5:
            return v
    return -1

def also(x: Collect[int]) -> int:
    return sum(x)
"""


def test_sequential_report_counts_every_sample_computed(build: Callable[..., fd.Driver]) -> None:
    dr = build(EARLY.format(kind="Sequential"))
    report = fd.Report()
    assert dr.execute(["first_big"], inputs={"n": 100}, report=report) == {"first_big": 5}
    assert report.seen == {"s": 6} and report.node_calls == {"x": 6}


LOCKSTEP = """
from flowdata import Collect, Sequential

EVENTS = []

def s(n: int) -> Sequential[int]:
    for i in range(n):
        EVENTS.append(("pull", i))
        yield i

def x(s: int) -> int:
    return s

def a(x: Collect[int]) -> int:
    for v in x:
        EVENTS.append(("a", v))
    return 0

def b(x: Collect[int]) -> int:
    for v in x:
        EVENTS.append(("b", v))
    return 0
"""


def test_sequential_consumers_take_each_sample_before_the_next_is_pulled(build: Callable[..., fd.Driver]) -> None:
    dr = build(LOCKSTEP)
    events = dr.nodes["s"].fn.__globals__["EVENTS"]
    assert dr.execute(["a", "b"], inputs={"n": 30}) == {"a": 0, "b": 0}
    at = {e: k for k, e in enumerate(events)}
    for i in range(29):
        assert at[("pull", i + 1)] > max(at[("a", i)], at[("b", i)]), events


@pytest.mark.parametrize("bad", [0, -2, 2.5, True])
def test_chunk_size_is_checked(build: Callable[..., fd.Driver], bad: object) -> None:
    dr = build(EARLY.format(kind="Parallel"))
    with pytest.raises(fd.InputError, match=r"chunk_size=.*: expected a positive int, or None to adapt"):
        dr.execute(["also"], inputs={"n": 10}, chunk_size=bad)  # type: ignore[arg-type]
