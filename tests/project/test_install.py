"""Every ordinary install of flowdata is seen by mypy and pyright from any folder.

Each install is real: pip installs this checkout into a fresh, empty virtual environment
(no torch there: the type checkers only need to find flowdata), with the build backend of
this environment (``--no-build-isolation``, so nothing is downloaded), then mypy --strict
and pyright check a module in a folder outside the repository against that environment,
with no ``PYTHONPATH``. ``pip install -e .`` is the case that used to fail: setuptools'
default editable install is an import hook, which static checkers cannot follow; the
hatchling backend writes a plain ``.pth`` path.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Only flowdata's typing names: the fresh environment has none of flowdata's dependencies.
USER = """\
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford


def item(n: int) -> Parallel[int]:
    yield from range(n)


@reduce(Welford)
def item_stats(item: Collect[int]) -> Stats:
    raise NotImplementedError("@reduce folds the values; the body is not called")


def wrong(n: int) -> Parallel[str]:
    yield n
"""
WRONG_LINE = 15  # the one error: proof that the checker read flowdata's own types

INSTALLS = {
    "pip install .": [],
    "pip install -e .": ["-e"],
    # The command scripts/setup.sh and the README used before (setuptools' compat mode):
    # a setting hatchling does not read, so the same install.
    "pip install -e . --config-settings editable_mode=compat": ["--config-settings", "editable_mode=compat", "-e"],
}


def _backend() -> None:
    missing = [m for m in ("hatchling", "editables") if importlib.util.find_spec(m) is None]
    assert not missing, f"{missing}: the build backend (pinned in constraints.txt) is installed by scripts/setup.sh"


def _install(how: str, folder: Path) -> tuple[Path, Path]:
    """A fresh environment in ``folder`` with this checkout installed as ``how`` says;
    returns its python and its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "env")], check=True, timeout=120)
    python = folder / "env" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # pip of this environment installs into the fresh one's site-packages (--target never
    # touches what this environment has installed).
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--target", str(site), *INSTALLS[how], str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return python, site


def _clean_env(home: Path) -> dict[str, str]:
    # As a user's shell after activating the environment: no PYTHONPATH, no repository.
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home)}


def _check(python: Path, folder: Path) -> dict[str, str]:
    """mypy --strict and pyright over USER, from a folder outside the repository."""
    outside = folder / "outside"
    outside.mkdir()
    (outside / "user_flow.py").write_text(USER)
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    assert pyright is not None, "pyright is installed by scripts/setup.sh"
    commands = {
        "mypy": [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", os.devnull,
                 "--python-executable", str(python), "user_flow.py"],
        "pyright": [pyright, "--pythonpath", str(python), "user_flow.py"],
    }
    outputs = {}
    for name, command in commands.items():
        result = subprocess.run(command, capture_output=True, text=True, cwd=outside, timeout=300,
                                env=_clean_env(folder))
        outputs[name] = f"rc={result.returncode}\n{result.stdout}{result.stderr}"
    return outputs


def _found(python: Path, folder: Path) -> Path:
    """Where the fresh environment's python finds the flowdata package (not imported:
    its dependencies are not there)."""
    out = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('flowdata').origin)"],
                         capture_output=True, text=True, check=True, cwd=folder, env=_clean_env(folder))
    return Path(out.stdout.strip()).parent


@pytest.mark.slow
@pytest.mark.parametrize("how", ["pip install .", "pip install -e ."])
def test_mypy_and_pyright_find_an_installed_flowdata(how: str, tmp_path: Path) -> None:
    _backend()
    python, site = _install(how, tmp_path)
    if how == "pip install .":
        assert _found(python, tmp_path) == site / "flowdata"
        assert (site / "flowdata" / "py.typed").is_file() and (site / "flowdata_modules" / "py.typed").is_file()
    else:
        assert _found(python, tmp_path) == ROOT / "flowdata"  # edits are live
        lines = [line for pth in site.glob("*.pth") for line in pth.read_text().splitlines() if line.strip()]
        # A plain path (once per package), which static checkers read; no import hook.
        assert lines and set(lines) == {str(ROOT)}, lines
    outputs = _check(python, tmp_path)
    for name, out in outputs.items():
        assert "import-not-found" not in out and "could not be resolved" not in out, (name, out)
        errors = [line for line in out.splitlines() if re.search(r"user_flow\.py:\d+(:\d+)?:? (- )?error", line)]
        assert len(errors) == 1 and f"user_flow.py:{WRONG_LINE}:" in errors[0], (name, out)
        assert out.startswith("rc=1\n"), (name, out)


@pytest.mark.slow
def test_the_former_compat_command_installs_the_same(tmp_path: Path) -> None:
    _backend()
    _, plain = _install("pip install -e .", tmp_path / "plain")
    _, compat = _install("pip install -e . --config-settings editable_mode=compat", tmp_path / "compat")
    for a, b in ((plain, compat), (compat, plain)):
        assert sorted(p.name for p in a.glob("*.pth")) == sorted(p.name for p in b.glob("*.pth"))
    assert [p.read_text() for p in sorted(plain.glob("*.pth"))] == [p.read_text() for p in sorted(compat.glob("*.pth"))]
