"""The markers type-check under mypy --strict and pyright in user code, with no ignores."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_MODULE = ROOT / "tests" / "typing_cases" / "user_module.py"


def test_user_module_has_no_ignores() -> None:
    assert "type: ignore" not in USER_MODULE.read_text()
    assert "pyright: ignore" not in USER_MODULE.read_text()


@pytest.fixture(scope="module")
def mypy_strict(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[str], Path]:
    """One ``mypy --strict`` run (a cold one costs 20 s) over the user module and a module
    with two wrong element types: its exit code, its lines, and the bad module's path."""
    bad = tmp_path_factory.mktemp("typing") / "bad.py"
    bad.write_text(
        "from flowdata import Parallel, Collect\n"
        "def item(n: int) -> Parallel[str]:\n"
        "    yield n\n"
        "def total(item: Collect[int]) -> str:\n"
        "    return sum(item)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", "/dev/null",
         "--ignore-missing-imports", str(USER_MODULE), str(bad)],
        capture_output=True, text=True, cwd=ROOT,
    )
    return result.returncode, (result.stdout + result.stderr).splitlines(), bad


@pytest.mark.slow
def test_mypy_strict_accepts_markers(mypy_strict: tuple[int, list[str], Path]) -> None:
    _, lines, _ = mypy_strict
    assert not [line for line in lines if USER_MODULE.name in line], "\n".join(lines)


@pytest.mark.slow
def test_mypy_rejects_a_wrong_element_type(mypy_strict: tuple[int, list[str], Path]) -> None:
    code, lines, bad = mypy_strict
    assert code == 1
    errors = [line for line in lines if line.startswith(str(bad))]
    assert any('Incompatible types in "yield" (actual type "int", expected type "str")' in e for e in errors), lines
    assert any('Incompatible return value type (got "int", expected "str")' in e for e in errors), lines
    assert len([line for line in lines if ": error:" in line]) == len(errors) == 2, lines


@pytest.mark.slow
def test_pyright_accepts_markers() -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    assert pyright is not None, "pyright is installed by scripts/setup.sh"
    result = subprocess.run(
        [pyright, "--pythonpath", sys.executable, str(USER_MODULE)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert result.returncode == 0 and "0 errors" in result.stdout, result.stdout + result.stderr


def test_markers_read_back() -> None:
    import typing

    import flowdata as fd
    from flowdata.types import read_marker

    hints = typing.get_type_hints(
        __import__("tests.typing_cases.user_module", fromlist=["x"]).paired, include_extras=True
    )
    assert read_marker(hints["length"]) == ("collect", int)
    assert read_marker(fd.Parallel[str]) == ("parallel", str)
    assert read_marker(fd.Sequential[bytes]) == ("sequential", bytes)
    assert read_marker(list[int]) == (None, list[int])
    assert read_marker(fd.Batch[list[int]]) == ("batch", list[int])


def test_user_module_runs() -> None:
    import flowdata as fd
    from tests.typing_cases import user_module

    dr = fd.Builder().with_modules(user_module).build()
    out = dr.execute(["total", "paired", "ticks", "hamilton_total"], inputs={"folder": "d", "n": 4, "names": ["ab", "c"]})
    assert out == {
        "total": 21,
        "paired": [(7, "d/0.wav"), (7, "d/1.wav"), (7, "d/2.wav")],
        "ticks": 6,
        "hamilton_total": 3,
    }


OUTSIDE = """
import flowdata as fd
from flowdata import Collect, Parallel


def item(n: int) -> Parallel[int]:
    yield from range(n)


def doubled(item: int) -> int:
    return 2 * item


def total(doubled: Collect[int]) -> int:
    return sum(doubled)


def train() -> None:
    import outside_flow

    dr = fd.Builder().with_modules(outside_flow).build()
    loader = dr.dataloader(["doubled"], inputs={"n": 4})
    loader.set_epoch(1)
    print(loader.stats, loader.report.summary(), loader.{loader_attr})
    dataset = dr.dataset(["doubled"], inputs={"n": 4})
    print(dataset.spec.group, dataset.{dataset_attr})
"""


@pytest.mark.slow
@pytest.mark.parametrize("checker", ["mypy", "pyright"])
def test_type_checkers_find_flowdata_from_any_folder(tmp_path: Path, checker: str) -> None:
    import tempfile

    outside = Path(tempfile.mkdtemp())  # not under the repository: found through the install alone
    try:
        # One checker run over a good and a bad module (a cold mypy costs 20 s a run).
        for name, attrs in (("good", ("report", "spec")), ("bad", ("repoort", "specc"))):
            (outside / f"{name}_flow.py").write_text(OUTSIDE.replace("outside_flow", f"{name}_flow").replace(
                "{loader_attr}", attrs[0]).replace("{dataset_attr}", attrs[1]))
        bin_dir = Path(sys.executable).parent
        files = ["good_flow.py", "bad_flow.py"]
        if checker == "mypy":
            cmd = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", "/dev/null", *files]
        else:
            cmd = [str(bin_dir / "pyright"), *files]
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}  # as after activating .venv
        result = subprocess.run(cmd, capture_output=True, text=True, cwd=outside, timeout=300, env=env)
        out = result.stdout + result.stderr
        assert "could not be resolved" not in out and "import-not-found" not in out, out
        assert result.returncode == 1, out
        errors = [line for line in out.splitlines() if "error" in line and "_flow.py" in line]
        assert errors and all("bad_flow.py" in e for e in errors), out  # the good module: no error
        assert "repoort" in out and "specc" in out  # misspelt loader and dataset attributes
    finally:
        import shutil as _shutil

        _shutil.rmtree(outside)
