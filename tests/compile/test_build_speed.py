"""A build as fast as a linter: modules that use no Hamilton modifier or
marker are built without importing Hamilton (and pandas through it), into the same graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.procs  # every test here starts processes (workers, pools or programs)

ROOT = Path(__file__).resolve().parents[2]
FLOWS = sorted(p.stem for p in (ROOT / "tests" / "dataflows").glob("*.py") if not p.stem.startswith("_"))
PLAIN = [f for f in FLOWS if "hamilton" not in (ROOT / "tests" / "dataflows" / f"{f}.py").read_text()]

DUMP = r"""
import json, sys
import flowdata as fd
from flowdata.types import type_name
import importlib
module = importlib.import_module("tests.dataflows." + sys.argv[1])
dr = fd.Builder().with_modules(module).build()
nodes = []
for n in dr.graph.nodes.values():
    nodes.append([n.name, type_name(n.type), n.source, n.module, n.function, n.file, n.line, n.positional_call,
                  sorted(n.tags.items()), n.doc, repr(n.reducer),
                  [[p.name, type_name(p.type), p.collect, repr(p.default), p.as_list] for p in n.params]])
roles = {k: v.value for k, v in dr.analysis.roles.items()}
print(json.dumps({"nodes": nodes, "roles": roles, "inputs": sorted(dr.graph.inputs),
                  "hamilton": "hamilton" in sys.modules, "pandas": "pandas" in sys.modules,
                  "light": [m for m in ("torch", "flowdata.run.executors", "logging", "pickle") if m in sys.modules]}))
"""


def _dump(flow: str, hamilton: bool) -> dict[str, object]:
    env = {**os.environ, "FLOWDATA_HAMILTON": "1" if hamilton else "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", DUMP, flow], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("flow", PLAIN)
def test_the_same_graph_with_and_without_hamilton(flow: str) -> None:
    fast, through_hamilton = _dump(flow, hamilton=False), _dump(flow, hamilton=True)
    assert fast.pop("hamilton") is False and fast.pop("pandas") is False  # never imported
    assert fast.pop("light") == []  # nor what only running needs (see tests/benchmarks/bench_build.py)
    assert through_hamilton.pop("hamilton") is True
    through_hamilton.pop("pandas"), through_hamilton.pop("light")
    assert fast == through_hamilton


def test_a_module_using_hamilton_is_resolved_by_hamilton() -> None:
    dump = _dump("modifiers_in_group", hamilton=False)
    assert dump["hamilton"] is True  # the module imports Hamilton's modifiers: they are applied
    assert dump["nodes"]
