"""The curated public names, and that importing flowdata stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import flowdata


def test_a_dead_worker_can_be_caught_by_its_own_name() -> None:
    from flowdata.errors import WorkerDied

    assert flowdata.WorkerDied is WorkerDied and issubclass(flowdata.WorkerDied, flowdata.FlowdataError)


def test_public_names_are_pinned() -> None:
    assert sorted(flowdata.__all__) == [
        "Batch",
        "Builder",
        "Collect",
        "DataLoader",
        "Driver",
        "Executor",
        "FlowdataError",
        "GraphError",
        "GraphProblem",
        "InlineExecutor",
        "InputError",
        "MediaError",
        "NodeError",
        "Parallel",
        "Plan",
        "ProcessExecutor",
        "RankError",
        "RayExecutor",
        "Report",
        "SampleError",
        "Sequential",
        "Skip",
        "TooManySkipped",
        "WorkerDied",
        "reduce",
        "vectorized",
    ]
    for name in flowdata.__all__:
        assert getattr(flowdata, name) is not None


def test_error_tree() -> None:
    assert issubclass(flowdata.GraphError, flowdata.FlowdataError)
    assert issubclass(flowdata.InputError, flowdata.FlowdataError)
    assert issubclass(flowdata.SampleError, flowdata.NodeError)
    assert issubclass(flowdata.NodeError, flowdata.FlowdataError)
    assert issubclass(flowdata.RankError, flowdata.FlowdataError)


@pytest.mark.procs
def test_import_does_not_load_heavy_dependencies() -> None:
    code = "import sys, flowdata; print(sorted(m for m in ('torch', 'hamilton', 'numpy', 'pandas', 'ray') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_py_typed_is_shipped() -> None:
    from pathlib import Path

    assert (Path(flowdata.__file__).parent / "py.typed").exists()


def test_every_error_class_lives_in_errors_and_where_it_was() -> None:
    from flowdata import errors
    from flowdata.driver import UnreadInputWarning
    from flowdata.report import TooManySkipped
    from flowdata.stats import StatsError

    assert errors.TooManySkipped is TooManySkipped is flowdata.TooManySkipped
    assert errors.StatsError is StatsError and issubclass(StatsError, (flowdata.FlowdataError, ValueError))
    assert errors.UnreadInputWarning is UnreadInputWarning and issubclass(UnreadInputWarning, UserWarning)
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type):
            assert obj.__module__ == "flowdata.errors", name


def _module_imports() -> dict[str, set[str]]:
    """flowdata's modules and the flowdata modules each imports at load time (not under
    TYPE_CHECKING, not inside functions)."""
    import ast
    from pathlib import Path

    root = Path(flowdata.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        deps: set[str] = set()
        for stmt in ast.parse(path.read_text()).body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("flowdata"):
                deps.add(stmt.module)
            elif isinstance(stmt, ast.Import):
                deps.update(a.name for a in stmt.names if a.name.startswith("flowdata"))
        graph[name] = deps
    return graph


def test_no_import_cycles() -> None:
    """Data flows one way: no flowdata module imports, at load time, one that imports it back
    (the package's own __init__, which only re-exports, aside)."""
    graph = _module_imports()
    assert graph["flowdata.node"] <= {"flowdata.reduce", "flowdata.types"}
    assert not {d for d in graph["flowdata.types"] if d != "flowdata"}

    def visit(name: str, path: list[str]) -> None:
        for dep in graph.get(name, ()):
            if dep == "flowdata" or dep not in graph:
                continue
            assert dep not in path, " -> ".join([*path, dep])
            visit(dep, [*path, dep])

    for name in graph:
        if name != "flowdata":
            visit(name, [name])
