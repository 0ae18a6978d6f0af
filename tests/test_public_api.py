"""The curated public names, and that importing flowdata stays light."""

from __future__ import annotations

import subprocess
import sys

import flowdata


def test_public_names_are_pinned() -> None:
    assert sorted(flowdata.__all__) == [
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
        "Report",
        "SampleError",
        "Sequential",
        "Skip",
        "TooManySkipped",
        "reduce",
    ]
    for name in flowdata.__all__:
        assert getattr(flowdata, name) is not None


def test_error_tree() -> None:
    assert issubclass(flowdata.GraphError, flowdata.FlowdataError)
    assert issubclass(flowdata.InputError, flowdata.FlowdataError)
    assert issubclass(flowdata.SampleError, flowdata.NodeError)
    assert issubclass(flowdata.NodeError, flowdata.FlowdataError)


def test_import_does_not_load_heavy_dependencies() -> None:
    code = "import sys, flowdata; print(sorted(m for m in ('torch', 'hamilton', 'numpy', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_py_typed_is_shipped() -> None:
    from pathlib import Path

    assert (Path(flowdata.__file__).parent / "py.typed").exists()
