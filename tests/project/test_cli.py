"""The flowdata command: check (linter-like) and run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowdata.cli import main

ROOT = Path(__file__).resolve().parents[2]

BAD = """
from flowdata import Parallel, Collect
def item(n: int) -> Parallel[int]:
    yield from range(n)
def total(item: list[int]) -> int:
    return sum(item)
def label(total: str) -> str:
    return total
"""


def test_check_clean_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "flowdata_modules.example"]) == 0
    assert capsys.readouterr().out.strip() == "ok: 11 nodes, no problems"


def test_check_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad_flow.py"
    bad.write_text(BAD)
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("2 problems in the graph:")
    assert "FD201 dangling-group: 'total' takes 'item' as list[int]" in out
    assert "FD101 type-mismatch: 'label' expects 'total' as str, but node 'total' returns int" in out
    assert "fix: annotate the parameter as 'item: Collect[int]'" in out


def test_check_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad_flow_json.py"
    bad.write_text(BAD)
    assert main(["check", str(bad), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert sorted(p["code"] for p in report["problems"]) == ["FD101", "FD201"]
    first = next(p for p in report["problems"] if p["code"] == "FD201")
    assert first["node"] == "total" and first["expected"] == "item: Collect[int]" and first["locations"]


def test_run_prints_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "flowdata_modules.example", "--outputs", "count,mean", "--input", "n=200", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["count"] == 200 and 15.0 < out["mean"] < 25.0


def test_run_reports_input_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "flowdata_modules.example", "--outputs", "nope"]) == 1
    assert "InputError: unknown output 'nope'" in capsys.readouterr().err


def test_run_with_config_and_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = tmp_path / "cfg_flow.py"
    mod.write_text(
        "from hamilton.function_modifiers import config\n"
        "@config.when(kind='double')\n"
        "def out__double(x: int) -> int:\n    return 2 * x\n"
        "@config.when(kind='triple')\n"
        "def out__triple(x: int) -> int:\n    return 3 * x\n"
    )
    assert main(["run", str(mod), "--outputs", "out", "--input", "x=5", "--config", "kind=triple", "--executor", "processes"]) == 0
    assert capsys.readouterr().out.split() == ["out", "15"]


def test_run_executor_ray_at_an_address(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``--executor ray:ADDRESS`` runs on a RayExecutor for that address, closed after the run
    (a real Ray runs it in tests/run/executors/test_ray.py)."""
    from flowdata.run.executors import ray as ray_executor

    seen: list[object] = []

    def fake_map(self: Any, fn: Any, tasks: Any, *, context: Any) -> Any:
        seen.append(self.address)
        return (fn(context, t) for t in tasks)

    monkeypatch.setattr(ray_executor.RayExecutor, "map", fake_map)
    monkeypatch.setattr(ray_executor.RayExecutor, "close", lambda self: seen.append("closed"))
    assert main(["run", "flowdata_modules.example", "--outputs", "count", "--input", "n=50",
                 "--executor", "ray:127.0.0.1:6379"]) == 0
    assert capsys.readouterr().out.split() == ["count", "50"]
    assert seen and set(seen[:-1]) == {"127.0.0.1:6379"} and seen[-1] == "closed"


@pytest.mark.parametrize("name", ["dask", "ray:", "threads"])
def test_run_refuses_an_unknown_executor(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["run", "flowdata_modules.example", "--outputs", "count", "--executor", name])
    assert stop.value.code == 2
    assert (f"argument --executor: expected inline, processes, ray or ray:ADDRESS (such as ray:auto or "
            f"ray:127.0.0.1:6379), got {name!r}") in capsys.readouterr().err


@pytest.mark.procs
def test_python_dash_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flowdata", "check", "flowdata_modules.example", "--format", "json"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0 and json.loads(result.stdout)["ok"] is True


def test_bad_key_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "flowdata_modules.example", "--outputs", "count", "--input", "oops"]) == 2
    assert capsys.readouterr().err == "flowdata: --input expects key=value, got 'oops'\n"


def test_unimportable_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "no_such_module_xyz"]) == 2
    assert "cannot import module" in capsys.readouterr().err


def test_module_with_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken_flow.py"
    broken.write_text("def a(x: int) -> int\n    return x\n")
    assert main(["check", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "cannot import module" in err and "broken_flow.py': SyntaxError" in err


def test_module_raising_at_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = tmp_path / "raises_flow.py"
    mod.write_text("raise RuntimeError('no config file')\n")
    assert main(["check", str(mod)]) == 2
    assert "raises_flow.py': RuntimeError: no config file" in capsys.readouterr().err


def test_empty_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "flowdata_modules.example", "--outputs", ","]) == 2
    assert "flowdata: --outputs needs at least one node name" in capsys.readouterr().err


@pytest.mark.parametrize(("raw", "chosen"), [("True", "on"), ("true", "on"), ("False", "off"), ("None", "off")])
def test_python_booleans_in_config(tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: str, chosen: str) -> None:
    mod = tmp_path / "switch_flow.py"
    mod.write_text(
        "from hamilton.function_modifiers import config\n"
        "@config.when(flag=True)\n"
        "def out__on(x: int) -> str:\n    return 'on'\n"
        "@config.when_not(flag=True)\n"
        "def out__off(x: int) -> str:\n    return 'off'\n"
    )
    assert main(["run", str(mod), "--outputs", "out", "--input", "x=1", "--config", f"flag={raw}"]) == 0
    assert capsys.readouterr().out.split() == ["out", repr(chosen)]


FLOW = """
import math
import numpy as np
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Vocab, Vocabulary, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def value(item: int, scale: float = 1.0) -> np.ndarray:
    return np.array([item * scale, 1.0])

def word(item: int, prefix: str = "w") -> str:
    return f"{prefix}{item % 2}"

@reduce(Welford, dim=0)
def stats(value: Collect[np.ndarray]) -> Stats: ...

@reduce(Vocabulary)
def vocab(word: Collect[str]) -> Vocab: ...

def nothing(n: int) -> float:
    return math.nan
"""


@pytest.fixture()
def flow(tmp_path: Path) -> Path:
    path = tmp_path / "cli_flow.py"
    path.write_text(FLOW)
    return path


def test_json_is_valid_with_nan_and_structured_values(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(flow), "--outputs", "stats,vocab,nothing", "--input", "n=4", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)  # NaN would not parse: it is null
    assert out["nothing"] is None
    assert out["stats"]["mean"] == [1.5, 1.0] and out["stats"]["count"] == [4, 4]
    assert out["vocab"] == {"tokens": ["w0", "w1"], "counts": [2, 2]}


@pytest.mark.parametrize(("given", "message"), [
    ("n=true", "--input n=true: 'n' is an int parameter, so it needs a whole number"),
    ("n=1.5", "--input n=1.5: 'n' is an int parameter, so it needs a whole number"),
    ("scale=abc", "--input scale=abc: 'scale' is a float parameter, so it needs a number"),
])
def test_inputs_are_read_by_their_annotation(flow: Path, capsys: pytest.CaptureFixture[str], given: str,
                                             message: str) -> None:
    assert main(["run", str(flow), "--outputs", "stats", "--input", "n=2", "--input", given]) == 2
    assert capsys.readouterr().err == f"flowdata: {message}\n"


def test_a_str_parameter_keeps_the_text(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(flow), "--outputs", "vocab", "--input", "n=2", "--input", "prefix=10",
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["vocab"]["tokens"] == ["100", "101"]


def test_plan_and_sample_commands(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(flow), "--outputs", "stats", "--input", "n=3"]) == 0
    assert capsys.readouterr().out.startswith("plan for stats")
    assert main(["sample", str(flow), "--outputs", "value,word", "--index", "3", "--input", "n=5",
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"value": [3.0, 1.0], "word": "w1"}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import flowdata

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"flowdata {flowdata.__version__}\n"


def test_check_a_folder_and_a_glob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "first.py").write_text("def a(n: int) -> int:\n    return n\n")
    (tmp_path / "src" / "second.py").write_text("def b(a: int) -> int:\n    return a\n")
    (tmp_path / "src" / "test_first.py").write_text("def test_a() -> None:\n    pass\n")
    assert main(["check", str(tmp_path / "src")]) == 0
    assert capsys.readouterr().out.strip() == "ok: 2 nodes, no problems"
    assert main(["check", str(tmp_path / "src" / "*.py")]) == 0
    assert capsys.readouterr().out.strip() == "ok: 3 nodes, no problems"  # a glob takes test_first.py too
    assert main(["check", str(tmp_path / "empty*")]) == 2
    assert capsys.readouterr().err.endswith(f"flowdata: no file matches '{tmp_path / 'empty*'}'\n")


def test_an_unknown_picture_format(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["viz", str(flow), "-o", "x.xyz"]) == 2
    assert capsys.readouterr().err == (
        "flowdata: -o x.xyz: unknown picture format 'xyz'; use one of .svg, .png, .pdf, .dot, .gv, or --mermaid\n")


@pytest.mark.procs
def test_a_closed_pipe_ends_quietly(flow: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "flowdata", "viz", str(flow)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 141) and "Traceback" not in err and "BrokenPipeError" not in err


def test_an_error_of_a_users_module_is_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = tmp_path / "raising_flow.py"
    mod.write_text("def total(n: int) -> int:\n    raise KeyError('no such column')\n")
    assert main(["run", str(mod), "--outputs", "total", "--input", "n=1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flowdata: NodeError: node 'total'") and "Traceback" not in err
