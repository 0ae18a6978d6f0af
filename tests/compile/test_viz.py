"""Pictures: structure checked on the DOT source, rendering when dot is present."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import flowdata as fd
import flowdata_modules.example as example
from flowdata.cli import main
from tests.dataflows import all_dataflows

GENERIC = """
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Count

def row(n: int) -> Parallel[dict[str, list[int]]]:
    for i in range(n):
        yield {"a": [i]}

def width(row: dict[str, list[int]]) -> int:
    if row["a"][0] == 3:
        raise ValueError("bad row")
    return len(row["a"])

@reduce(Count)
def rows(width: Collect[int]) -> int: ...

def scaled(width: int, rows: int) -> float:
    return width / rows

def total(scaled: Collect[float]) -> float:
    return sum(scaled)

def label(n: int) -> str:
    return f"<{n}> \\"quoted\\""
"""


def _node_line(source: str, name: str) -> str:
    match = re.search(rf"^\s*{re.escape(name)} \[.*?\]$", source, re.M | re.S)
    assert match, f"node {name} not in DOT"
    return match.group(0)


def _cluster(source: str, group: str) -> str:
    start = source.index(f"subgraph cluster_{group} {{")
    return source[start : source.index("\n\t}", start)]


def test_groups_roles_passes_and_types_on_the_dot_source(build: Callable[..., fd.Driver]) -> None:
    dr = build(GENERIC)
    dot = dr.visualize()
    src = dot.source
    cluster = _cluster(src, "row")
    assert "style=\"dotted,rounded\"" in cluster and "group 'row' (parallel)" in cluster
    for inside in ("row", "width", "scaled"):
        assert re.search(rf"^\s*{inside} \[", cluster, re.M), inside
    for outside in ("rows", "total", "label"):
        assert not re.search(rf"^\s*{outside} \[", cluster, re.M), outside
    assert "shape=cds" in _node_line(src, "row")
    assert "shape=box" in _node_line(src, "width") and "pass 1" in _node_line(src, "width")
    assert "pass 2" in _node_line(src, "scaled") and "#fff4d6" in _node_line(src, "scaled")
    assert "shape=doubleoctagon" in _node_line(src, "rows") and "@reduce(Count)" in _node_line(src, "rows")
    assert "shape=invtrapezium" in _node_line(src, "total")
    assert "style=dashed" in _node_line(src, "n")
    assert 'label="dict[str, list[int]]"' in src  # a generic type on an edge, intact
    assert re.search(r'width -> rows \[label="Collect\[int\]" arrowhead=crow', src)
    assert "cluster_legend" in src


def test_outputs_draw_only_what_they_need(build: Callable[..., fd.Driver]) -> None:
    dr = build(GENERIC)
    src = dr.visualize(outputs=["rows"], legend=False).source
    assert "width" in src and "rows" in src
    assert not re.search(r"^\s*(total|scaled|label) \[", src, re.M)
    with pytest.raises(fd.FlowdataError, match=r"cannot draw unknown node\(s\) 'nope'"):
        dr.visualize(outputs=["nope"])


def test_report_overlay(build: Callable[..., fd.Driver]) -> None:
    dr = build(GENERIC)
    report = fd.Report()
    dr.execute(["total"], inputs={"n": 10}, on_error="skip", report=report)
    src = dr.visualize(report=report).source
    width = _node_line(src, "width")
    assert re.search(r"\d+ calls, [\d.e-]+s \(\d+%\)", width)
    assert "1 skipped" in width and "#d93025" in width
    assert "samples seen" in _cluster(src, "row")


@pytest.mark.procs
def test_quotes_and_brackets_survive(build: Callable[..., fd.Driver], tmp_path: Path) -> None:
    dr = build(GENERIC)
    dot = dr.visualize(show_types=True)
    if shutil.which("dot"):
        dot.pipe(format="svg")  # dot parses it: nothing in the labels broke the syntax


@pytest.mark.procs
@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot program is not installed")
def test_renders_svg_and_png(tmp_path: Path) -> None:
    dr = fd.Builder().with_modules(example).build()
    svg, png = tmp_path / "dag.svg", tmp_path / "dag.png"
    dr.visualize(svg)
    dr.visualize(png)
    assert svg.read_text().lstrip().startswith(("<?xml", "<svg"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.procs
def test_missing_dot_program_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot on this PATH
    dr = fd.Builder().with_modules(example).build()
    with pytest.raises(fd.FlowdataError, match=r"needs graphviz's 'dot' program.*\n  fix: apt-get install graphviz"):
        dr.visualize(tmp_path / "x.svg")
    assert "digraph" in dr.visualize().source  # DOT text needs no binary


@pytest.mark.parametrize("module", all_dataflows(), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_dataflow_draws(module: Any) -> None:
    dr = fd.Builder().with_modules(module).build()
    src = dr.visualize().source
    assert src.startswith("digraph flowdata")
    assert dr.to_mermaid().startswith("flowchart LR")


def test_mermaid(build: Callable[..., fd.Driver]) -> None:
    text = build(GENERIC).to_mermaid()
    assert 'subgraph n_group_row["group row (parallel)"]' in text
    assert "n_width ==>|Collect| n_rows" in text
    assert 'n_rows{{"rows · pass 1"}}' in text


@pytest.mark.procs
def test_cli_viz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["viz", "flowdata_modules.example", "--outputs", "std"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("digraph flowdata") and "per_sensor_max" not in out
    assert main(["viz", "flowdata_modules.example", "--mermaid"]) == 0
    assert capsys.readouterr().out.startswith("flowchart LR")
    if shutil.which("dot"):
        target = tmp_path / "dag.svg"
        assert main(["viz", "flowdata_modules.example", "-o", str(target)]) == 0
        assert target.exists() and f"wrote {target}" in capsys.readouterr().out
