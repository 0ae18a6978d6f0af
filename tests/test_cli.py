"""The flowdata command: check (linter-like) and run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flowdata.cli import main

ROOT = Path(__file__).resolve().parents[1]

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


def test_python_dash_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flowdata", "check", "flowdata_modules.example", "--format", "json"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0 and json.loads(result.stdout)["ok"] is True


def test_bad_key_value() -> None:
    with pytest.raises(SystemExit, match=r"--input expects key=value, got 'oops'"):
        main(["run", "flowdata_modules.example", "--outputs", "count", "--input", "oops"])


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


def test_empty_outputs() -> None:
    with pytest.raises(SystemExit, match=r"--outputs needs at least one node name"):
        main(["run", "flowdata_modules.example", "--outputs", ","])


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
