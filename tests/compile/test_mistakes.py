"""Mistakes a newcomer makes, caught when the graph is built or the call is made: near
names, generators annotated as iterators, a per-sample iterator read as Collect, a source
given one item, nodes flowdata cannot call (also through ``flowdata check``), the reducer
result fix."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


import pytest

import flowdata as fd
from flowdata.errors import InputLikeNodeWarning

TYPO = """
from flowdata import Collect, Parallel

def items(n: int) -> Parallel[int]:
    yield from range(n)

def features(items: int) -> float:
    return items * 2.0

def scaled(featurs: float) -> float:
    return featurs

def total(features: Collect[float]) -> float:
    return sum(features)
"""


def test_a_parameter_spelt_almost_like_a_node(build: Callable[..., fd.Driver]) -> None:
    with pytest.warns(InputLikeNodeWarning, match=r"FD401 input-like-a-node: 'scaled' \(.*:10\) reads 'featurs', which no node makes, so it is an input; did you mean node 'features' \(.*:7\)\?\n  fix: rename the parameter 'featurs' to 'features'"):
        dr = build(TYPO)
    with pytest.raises(fd.InputError, match=r"'featurs': read by scaled \(.*\) \(did you mean node 'features'\? a parameter spelt like no node is an input\)"):
        dr.execute(["scaled"], inputs={"n": 2})


def test_a_missing_input_given_under_a_near_name(build: Callable[..., fd.Driver]) -> None:
    with pytest.warns(InputLikeNodeWarning):
        dr = build(TYPO)
    with pytest.raises(fd.InputError, match=r"missing input 'n':\n  'n': read by items \(.*\) \(did you mean the input 'nn' you gave\?\)"), \
            pytest.warns(fd.errors.UnreadInputWarning):
        dr.execute(["total"], inputs={"nn": 2})


def test_a_generator_annotated_as_an_iterator(build: Callable[..., fd.Driver]) -> None:
    with pytest.raises(fd.GraphError, match=r"^1 problem in the graph:\nFD202 collect-outside-group: 'count' collects 'words'(.|\n)*fix: 'words' yields items: to make each one a sample, annotate it '-> Parallel\[str\]' \(or Sequential\[str\]\) instead of '-> Iterator\[str\]'$"):
        build("""
        from collections.abc import Iterator
        from flowdata import Collect

        def words(text: str) -> Iterator[str]:
            yield from text.split()

        def count(words: Collect[str]) -> int:
            return sum(1 for _ in words)
        """)


def test_a_per_sample_iterator_read_as_collect_is_a_type_mismatch(build: Callable[..., fd.Driver]) -> None:
    # Only a whole-valued generator is left to FD202; a per-sample one is a plain mismatch.
    with pytest.raises(fd.GraphError, match=r"^1 problem in the graph:\nFD101 type-mismatch: 'total' expects 'parts' as Collect\[int\], but node 'parts' returns Iterator\[int\]"):
        build("""
        from collections.abc import Iterator
        from flowdata import Collect, Parallel

        def row(n: int) -> Parallel[int]:
            yield from range(n)

        def parts(row: int) -> Iterator[int]:
            yield row

        def total(parts: Collect[int]) -> int:
            return sum(1 for _ in parts)
        """)


def test_a_source_given_one_item_through_inputs_gets_the_run_sample_fix(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Collect, Parallel

    def rows(n: int) -> Parallel[int]:
        yield from range(n)

    def double(rows: int) -> int:
        return rows * 2

    def total(double: Collect[int]) -> int:
        return sum(double)
    """)
    with pytest.raises(fd.InputError, match=r"cannot override source 'rows' \(.*\): it yields the samples of its group(.|\n)*fix: .*driver.run_sample\(\['double'\], item=5\)"):
        dr.execute(["total"], inputs={"rows": 5})
    assert dr.execute(["total"], inputs={"rows": [1, 2]}) == {"total": 6}  # its items, as with overrides=


UNSUPPORTED = """
from flowdata import Parallel

async def fetched(url: str) -> str:
    return url

def star(*values: int) -> int:
    return 1

def items(n: int, sample_index: int) -> Parallel[int]:
    yield from range(n)
"""


def test_nodes_flowdata_cannot_call(build: Callable[..., fd.Driver]) -> None:
    with pytest.raises(fd.GraphError) as info:
        build(UNSUPPORTED)
    text = str(info.value)
    assert "FD006 async-node: function 'fetched' is an async def: flowdata calls nodes synchronously" in text
    assert "fix: make it a plain def; for concurrent I/O, run the requests inside it (asyncio.run(...))" in text
    assert "FD007 variadic-parameters: function 'star' takes *values: a node's parameters name the nodes it reads" in text
    assert ("FD208 source-reads-builtin: source 'items' reads 'sample_index', which exists only per sample, "
            "once 'items' has yielded it") in text
    assert [p.code for p in info.value.problems] == ["FD006", "FD007", "FD208"]


@pytest.mark.procs
def test_flowdata_check_reports_them(tmp_path: Path) -> None:
    (tmp_path / "unsupported.py").write_text(UNSUPPORTED)
    (tmp_path / "typo.py").write_text(TYPO)
    bad = subprocess.run([sys.executable, "-m", "flowdata", "check", "unsupported.py"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "FD006 async-node" in bad.stdout and "FD208 source-reads-builtin" in bad.stdout
    typo = subprocess.run([sys.executable, "-m", "flowdata", "check", "typo.py"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert typo.returncode == 0
    assert typo.stdout.startswith("ok: 4 nodes, no problems, 1 warning(s):\nFD401 input-like-a-node: 'scaled' (typo.py:10)")


def test_the_reducer_result_fix_names_an_importable_type(build: Callable[..., fd.Driver]) -> None:
    with pytest.raises(fd.GraphError, match=r"fix: declare '-> flowdata\.stats\.Stats' on 'stats'"):
        build("""
        from flowdata import Collect, Parallel, reduce
        from flowdata.stats import Welford
        def x(n: int) -> Parallel[float]:
            yield from (float(i) for i in range(n))
        @reduce(Welford)
        def stats(x: Collect[float]) -> float: ...
        """)
    from flowdata.stats import Stats  # what the fix says to write is importable

    assert Stats.__name__ == "Stats"


