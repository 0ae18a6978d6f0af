"""Plans are pure, printable data: groups, passes, once nodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

import flowdata as fd
import flowdata_modules.example as example


def test_plan_of_the_example_prints_groups_and_passes() -> None:
    dr = fd.Builder().with_modules(example).build()
    plan = dr.plan(["summary"])
    assert str(plan) == "\n".join([
        "plan for summary",
        "  inputs: n, seed",
        "  once: mean, summary",
        "  group 'readings' (parallel)",
        "    pass 1",
        "      computes: value",
        "      feeds:    count, total",
        "      reads:    n, seed",
        "    pass 2",
        "      computes: value, squared_deviation",
        "      feeds:    std",
        "      reads:    mean, n, seed",
        "    pass 3",
        "      computes: value, normalized, sensor",
        "      feeds:    per_sensor_max",
        "      reads:    mean, n, seed, std",
    ])
    group = plan.group("readings")
    assert group.kind == "parallel"
    assert group.collects == ("count", "total", "std", "per_sensor_max")
    assert group.per_sample == ("value", "squared_deviation", "normalized", "sensor")


def test_plan_is_immutable_and_pure() -> None:
    dr = fd.Builder().with_modules(example).build()
    a, b = dr.plan(["summary"]), dr.plan(["summary"])
    assert a == b
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.outputs = ("x",)  # type: ignore[misc]


def test_plan_only_needed_nodes() -> None:
    dr = fd.Builder().with_modules(example).build()
    plan = dr.plan(["count"])
    (group,) = plan.groups
    assert [(p.number, p.computes, p.feeds) for p in group.passes] == [(1, ("value",), ("count",))]
    assert plan.once == ()


def test_plan_with_per_sample_outputs_yields_them_in_the_last_pass() -> None:
    dr = fd.Builder().with_modules(example).build()
    plan = dr.plan(["normalized", "sensor"])
    last = plan.group("readings").passes[-1]
    assert last.number == 3 and last.outputs == ("normalized", "sensor")
    assert "      yields:   normalized, sensor" in str(plan)


def test_per_sample_outputs_of_two_groups_rejected(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel
    def a(xs: list[int]) -> Parallel[int]:
        yield from xs
    def b(ys: list[int]) -> Parallel[int]:
        yield from ys
    def a2(a: int) -> int:
        return a
    def b2(b: int) -> int:
        return b
    """)
    with pytest.raises(fd.InputError, match=r"per-sample outputs come from several groups \(a, b\)"):
        dr.plan(["a2", "b2"])


def test_unpicklable_whole_value_is_named(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    import threading
    from flowdata import Parallel, Collect
    def lock() -> object:
        return threading.Lock()
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def guarded(item: int, lock: object) -> int:
        return item
    def total(guarded: Collect[int]) -> int:
        return sum(guarded)
    """)
    assert dr.execute(["total"], inputs={"n": 5}) == {"total": 10}
    with pytest.raises(fd.FlowdataError, match=r"'lock' \(a lock\) is read by group 'item' but cannot be sent to worker processes"):
        dr.execute(["total"], inputs={"n": 5}, executor="processes")


