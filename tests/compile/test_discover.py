"""Discovery goes through Hamilton's builder: its function modifiers work on flowdata modules."""

from __future__ import annotations

import logging

import pytest

import flowdata as fd
from flowdata.node import Role


def test_parameterize(build: object) -> None:
    dr = build("""
    from hamilton.function_modifiers import parameterize, value, source
    @parameterize(
        small={"base": value(1), "scale": source("factor")},
        large={"base": value(100), "scale": source("factor")},
    )
    def sized(base: int, scale: int) -> int:
        return base * scale
    """)  # type: ignore[operator]
    assert dr.execute(["small", "large"], inputs={"factor": 3}) == {"small": 3, "large": 300}
    assert dr.nodes["small"].function == "sized"


def test_extract_fields(build: object) -> None:
    dr = build("""
    from hamilton.function_modifiers import extract_fields
    @extract_fields({"low": int, "high": int})
    def bounds(xs: list[int]) -> dict:
        return {"low": min(xs), "high": max(xs)}
    def width(low: int, high: int) -> int:
        return high - low
    """)  # type: ignore[operator]
    assert dr.execute(["width", "low"], inputs={"xs": [4, 9, 1]}) == {"width": 8, "low": 1}


def test_extract_fields_types_are_checked(build: object) -> None:
    with pytest.raises(fd.GraphError, match=r"FD101 type-mismatch: 'shout' expects 'low' as str, but node 'low' returns int"):
        build("""
        from hamilton.function_modifiers import extract_fields
        @extract_fields({"low": int})
        def bounds(xs: list[int]) -> dict:
            return {"low": min(xs)}
        def shout(low: str) -> str:
            return low
        """)  # type: ignore[operator]


def test_config_when(make_module: object) -> None:
    module = make_module("""
    from hamilton.function_modifiers import config
    @config.when(mode="fast")
    def result__fast(x: int) -> int:
        return x
    @config.when(mode="exact")
    def result__exact(x: int) -> int:
        return x * 1000
    """)  # type: ignore[operator]
    fast = fd.Builder().with_modules(module).with_config({"mode": "fast"}).build()
    exact = fd.Builder().with_modules(module).with_config({"mode": "exact"}).build()
    assert fast.execute(["result"], inputs={"x": 2}) == {"result": 2}
    assert exact.execute(["result"], inputs={"x": 2}) == {"result": 2000}


def test_tag(build: object) -> None:
    dr = build("""
    from hamilton.function_modifiers import tag
    @tag(owner="audio-team", stage="decode")
    def decoded(path: str) -> str:
        return path.upper()
    """)  # type: ignore[operator]
    tags = dr.nodes["decoded"].tags
    assert tags["owner"] == "audio-team" and tags["stage"] == "decode"
    assert dr.execute(["decoded"], inputs={"path": "a.wav"}) == {"decoded": "A.WAV"}


def test_check_output_passes_and_warns(build: object, caplog: pytest.LogCaptureFixture) -> None:
    dr = build("""
    from hamilton.function_modifiers import check_output
    @check_output(range=(0, 10), importance="warn")
    def level(x: int) -> int:
        return x
    """)  # type: ignore[operator]
    assert dr.execute(["level"], inputs={"x": 5}) == {"level": 5}
    with caplog.at_level(logging.WARNING):
        assert dr.execute(["level"], inputs={"x": 50}) == {"level": 50}
    assert any("level" in r.getMessage() for r in caplog.records)


def test_check_output_fail_raises_node_error(build: object) -> None:
    dr = build("""
    from hamilton.function_modifiers import check_output
    @check_output(range=(0, 10), importance="fail")
    def level(x: int) -> int:
        return x
    """)  # type: ignore[operator]
    with pytest.raises(fd.NodeError, match=r"node 'level\S*' \(.*:3\) failed: DataValidationError"):
        dr.execute(["level"], inputs={"x": 50})


def test_pipe(build: object) -> None:
    dr = build("""
    from hamilton.function_modifiers import pipe, step, value
    def _add(v: int, amount: int) -> int:
        return v + amount
    def _mul(v: int, by: int) -> int:
        return v * by
    @pipe(step(_add, amount=value(1)), step(_mul, by=value(10)))
    def result(start: int) -> int:
        return start
    """)  # type: ignore[operator]
    assert dr.execute(["result"], inputs={"start": 2}) == {"result": 30}


@pytest.mark.procs
def test_modifiers_work_inside_a_group(build: object) -> None:
    dr = build("""
    from hamilton.function_modifiers import parameterize, source, value, tag
    from flowdata import Parallel, Collect
    def item(xs: list[int]) -> Parallel[int]:
        yield from xs
    @tag(kind="per-sample")
    @parameterize(plus_one={"v": source("item"), "k": value(1)}, plus_two={"v": source("item"), "k": value(2)})
    def plus(v: int, k: int) -> int:
        return v + k
    def totals(plus_one: Collect[int], plus_two: Collect[int]) -> tuple[int, int]:
        a = b = 0
        for x, y in zip(plus_one, plus_two):
            a, b = a + x, b + y
        return a, b
    """)  # type: ignore[operator]
    assert dr.role("plus_one") is Role.PER_SAMPLE
    assert dr.nodes["plus_two"].tags["kind"] == "per-sample"
    assert dr.execute(["totals"], inputs={"xs": [1, 2, 3]}) == {"totals": (9, 12)}
    assert dr.execute(["totals"], inputs={"xs": [1, 2, 3]}, executor="processes") == {"totals": (9, 12)}


def test_private_functions_and_imports_are_not_nodes(build: object) -> None:
    dr = build("""
    from os.path import join
    def _helper(x: int) -> int:
        return x
    def public(x: int) -> int:
        return _helper(x)
    """)  # type: ignore[operator]
    assert list(dr.nodes) == ["public"]


def test_node_location_and_role(build: object) -> None:
    dr = build("""
    from flowdata import Parallel, Collect

    def item(n: int) -> Parallel[int]:
        yield from range(n)

    def total(item: Collect[int]) -> int:
        return sum(item)
    """)  # type: ignore[operator]
    assert dr.nodes["item"].location.endswith(":4")
    assert dr.nodes["item"].source == "parallel" and dr.nodes["item"].type is int
    assert dr.role("item") is Role.SOURCE and dr.role("total") is Role.COLLECT and dr.role("n") is Role.INPUT
    assert dr.nodes["total"].signature == "total(item: Collect[int]) -> int"
