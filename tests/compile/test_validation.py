"""Every structural mistake is caught at build time, all at once, before user code runs.

Each bad module's functions raise if called, so a passing test also shows no user code ran.
"""

from __future__ import annotations

import pytest

import flowdata as fd

BOOM = "raise AssertionError('user code ran during build')"


def _problems(build: object, source: str) -> list[fd.GraphProblem]:
    with pytest.raises(fd.GraphError) as info:
        build(source)  # type: ignore[operator]
    return list(info.value.problems)


def test_dangling_group_list_parameter(build: object) -> None:
    src = f"""
    from flowdata import Parallel
    def item(n: int) -> Parallel[int]:
        {BOOM}
    def square(item: int) -> int:
        {BOOM}
    def total(square: list[int]) -> int:
        {BOOM}
    """
    with pytest.raises(fd.GraphError, match=r"FD201 dangling-group: 'total' takes 'square' as list\[int\]") as info:
        build(src)  # type: ignore[operator]
    (p,) = info.value.problems
    assert p.fix == "annotate the parameter as 'square: Collect[int]'"
    assert p.expected == "square: Collect[int]" and p.actual == "square: list[int]"
    assert p.locations[0].endswith(":7") and p.locations[1].endswith(":5")


def test_dangling_group_iterable_parameter(build: object) -> None:
    src = f"""
    from collections.abc import Iterable
    from flowdata import Parallel
    def item(n: int) -> Parallel[int]:
        {BOOM}
    def joined(item: Iterable[int]) -> str:
        {BOOM}
    """
    (p,) = _problems(build, src)
    assert p.code == "FD201" and "Collect[int]" in p.fix


def test_nested_source(build: object) -> None:
    src = f"""
    from flowdata import Parallel, Collect
    def folder(roots: list[str]) -> Parallel[str]:
        {BOOM}
    def file(folder: str) -> Parallel[str]:
        {BOOM}
    def n_files(file: Collect[str]) -> int:
        {BOOM}
    """
    with pytest.raises(fd.GraphError, match=r"FD205 nested-source: source 'file' reads 'folder', a per-sample value of group 'folder'"):
        build(src)  # type: ignore[operator]


def test_join_of_two_groups(build: object) -> None:
    src = f"""
    from flowdata import Parallel, Collect
    def left(a: list[int]) -> Parallel[int]:
        {BOOM}
    def right(b: list[int]) -> Parallel[int]:
        {BOOM}
    def both(left: int, right: int) -> int:
        {BOOM}
    def total(both: Collect[int]) -> int:
        {BOOM}
    """
    problems = _problems(build, src)
    assert [p.code for p in problems] == ["FD204"]
    assert "'both' joins per-sample values of two groups: 'left' (group 'left'), 'right' (group 'right')" in str(problems[0])


def test_collect_outside_any_group(build: object) -> None:
    src = f"""
    from flowdata import Collect
    def config_value(x: int) -> int:
        {BOOM}
    def total(config_value: Collect[int]) -> int:
        {BOOM}
    def from_input(some_input: Collect[int]) -> int:
        {BOOM}
    """
    problems = _problems(build, src)
    assert [p.code for p in problems] == ["FD202", "FD202"]
    messages = sorted(p.message for p in problems)
    assert "'from_input' collects 'some_input', but 'some_input' is an input" in messages[0]
    assert "'total' collects 'config_value', but 'config_value' is once node 'config_value'" in messages[1]


def test_two_collects_from_different_groups(build: object) -> None:
    src = f"""
    from flowdata import Parallel, Collect
    def a(xs: list[int]) -> Parallel[int]:
        {BOOM}
    def b(ys: list[int]) -> Parallel[int]:
        {BOOM}
    def zipped(a: Collect[int], b: Collect[int]) -> int:
        {BOOM}
    """
    with pytest.raises(fd.GraphError, match=r"FD203 collect-mixed-groups: 'zipped' collects from two groups"):
        build(src)  # type: ignore[operator]


def test_collect_and_per_sample_in_one_node(build: object) -> None:
    src = f"""
    from flowdata import Parallel, Collect
    def a(xs: list[int]) -> Parallel[int]:
        {BOOM}
    def b(a: int) -> int:
        {BOOM}
    def odd(a: Collect[int], b: int) -> int:
        {BOOM}
    """
    with pytest.raises(fd.GraphError, match=r"FD206 collect-and-per-sample"):
        build(src)  # type: ignore[operator]


def test_missing_annotations_reported_together_with_other_problems(build: object) -> None:
    src = f"""
    from flowdata import Parallel
    def item(n: int) -> Parallel[int]:
        {BOOM}
    def bad(item):
        {BOOM}
    def no_return(item: int):
        {BOOM}
    def wrong(item: str) -> str:
        {BOOM}
    """
    problems = _problems(build, src)
    assert sorted(p.code for p in problems) == ["FD001", "FD001", "FD101"]
    messages = "\n".join(str(p) for p in problems)
    assert "function 'bad' has no type for parameter 'item', the return value" in messages
    assert "function 'no_return' has no type for the return value" in messages
    assert "'wrong' expects 'item' as str, but node 'item' yields items of int" in messages


def test_cycle_path_printed(build: object) -> None:
    src = f"""
    def a(c: int) -> int:
        {BOOM}
    def b(a: int) -> int:
        {BOOM}
    def c(b: int) -> int:
        {BOOM}
    def d(x: int) -> int:
        {BOOM}
    """
    with pytest.raises(fd.GraphError, match=r"FD005 cycle: the graph has a cycle: (a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)"):
        build(src)  # type: ignore[operator]


def test_misplaced_markers(build: object) -> None:
    src = f"""
    from flowdata import Parallel, Collect
    def x(n: int) -> Parallel[int]:
        {BOOM}
    def a(x: Parallel[int]) -> int:
        {BOOM}
    def b(y: int) -> Collect[int]:
        {BOOM}
    """
    problems = _problems(build, src)
    assert [p.code for p in problems] == ["FD003", "FD003"]  # one problem each, no follow-on errors
    assert "Parallel[...] on parameter 'x'" in problems[0].message


def test_builtin_outside_group(build: object) -> None:
    src = f"""
    def a(sample_index: int) -> int:
        {BOOM}
    """
    with pytest.raises(fd.GraphError, match=r"FD207 builtin-outside-group: 'a' reads 'sample_index'"):
        build(src)  # type: ignore[operator]


def test_input_read_with_conflicting_types(build: object) -> None:
    src = f"""
    def a(path: str) -> int:
        {BOOM}
    def b(path: int) -> int:
        {BOOM}
    """
    with pytest.raises(fd.GraphError, match=r"FD102 input-conflict: input 'path' is read as str by 'a' and as int by 'b'"):
        build(src)  # type: ignore[operator]


def test_duplicate_node_across_modules(make_module: object) -> None:
    m1 = make_module("def a(x: int) -> int:\n    return x\n")  # type: ignore[operator]
    m2 = make_module("def a(x: int) -> int:\n    return x\n")  # type: ignore[operator]
    with pytest.raises(fd.GraphError, match=r"FD004 duplicate-node: node 'a' is defined twice"):
        fd.Builder().with_modules(m1, m2).build()


def test_modifier_error_is_a_problem_not_a_crash(build: object) -> None:
    src = """
    from hamilton.function_modifiers import ResolveAt, extract_fields, resolve
    @resolve(when=ResolveAt.CONFIG_AVAILABLE, decorate_with=lambda names: extract_fields({n: int for n in names}))
    def fields(x: int) -> dict[str, int]:
        return {}
    """
    # @resolve needs Hamilton's power-user mode: the failure happens while expanding, at build.
    with pytest.raises(fd.GraphError, match=r"FD002 modifier-error: function 'fields' could not be expanded: \w+") as info:
        build(src)  # type: ignore[operator]
    assert "with_config" in info.value.problems[0].fix


def test_collect_returning_parallel_is_allowed(build: object) -> None:
    src = """
    from flowdata import Parallel, Collect
    def a(xs: list[int]) -> Parallel[int]:
        yield from xs
    def evens(a: Collect[int]) -> Parallel[int]:
        for x in a:
            if x % 2 == 0:
                yield x
    def halves(evens: int) -> int:
        return evens // 2
    def total(halves: Collect[int]) -> int:
        return sum(halves)
    """
    dr = build(src)  # type: ignore[operator]
    assert dr.execute(["total"], inputs={"xs": list(range(10))}) == {"total": 0 + 1 + 2 + 3 + 4}


def test_all_problems_in_one_error(build: object) -> None:
    src = f"""
    from flowdata import Parallel, Collect
    def g1(a: list[int]) -> Parallel[int]:
        {BOOM}
    def g2(b: list[int]) -> Parallel[int]:
        {BOOM}
    def joined(g1: int, g2: int) -> int:
        {BOOM}
    def dangling(g1: list[int]) -> int:
        {BOOM}
    def bad_collect(x: Collect[int]) -> int:
        {BOOM}
    def mismatch(g1: str) -> str:
        {BOOM}
    def noann(q):
        {BOOM}
    """
    with pytest.raises(fd.GraphError, match=r"^5 problems in the graph:") as info:
        build(src)  # type: ignore[operator]
    assert sorted(info.value.codes) == ["FD001", "FD101", "FD201", "FD202", "FD204"]
    for p in info.value.problems:
        assert p.locations and all(":" in loc for loc in p.locations)
        assert p.fix
