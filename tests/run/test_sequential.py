"""Sequential groups: one sample at a time, in this process -- one ``sample_rng`` shared by
the group's nodes, every consumer fed a sample before the next is pulled, and the report
counting every sample computed, also when a consumer stops early."""

from __future__ import annotations

from collections.abc import Callable

import flowdata as fd


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
