"""The pages' idioms type-check under mypy --strict and pyright in user code, with no
ignores: markers, reductions, batch nodes, what the driver returns, the statistics types,
and every ``@reduce`` of every page. One run of each checker covers them all (a cold mypy
costs about 20 s)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "typing_cases"
USER_MODULE = CASES / "user_module.py"
CASE_FILES = [USER_MODULE, CASES / "reductions.py", CASES / "usage.py"]

# Misuse each checker must report, on these lines of bad.py (mypy's messages).
BAD = """\
import flowdata as fd
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford


def item(n: int) -> Parallel[str]:
    yield n


def total(item: Collect[int]) -> str:
    return sum(item)


@reduce(Welford)
def item_stats(item: Collect[int]) -> Stats: ...


def use(dr: fd.Driver, stats: Stats) -> None:
    print(len(dr.dataset(["item"], streaming=True)))
    print(stats.meen)
"""
BAD_ERRORS = {
    7: 'Incompatible types in "yield" (actual type "int", expected type "str")',
    11: 'Incompatible return value type (got "int", expected "str")',
    15: "Missing return statement  [empty-body]",  # mypy only: pyright accepts a `...` body
    19: 'Argument 1 to "len" has incompatible type "StreamDataset | LaneDataset"; expected "Sized"',
    20: '"Stats" has no attribute "meen"',
}


def test_the_cases_have_no_ignores() -> None:
    for path in CASE_FILES:
        assert "type: ignore" not in path.read_text(), path
        assert "pyright: ignore" not in path.read_text(), path


_REDUCE = re.compile(r"^@(fd\.)?reduce\(", re.M)


def page_reductions(folder: Path) -> dict[Path, list[tuple[str, int, int]]]:
    """Writes every page block holding a ``@reduce`` into ``folder`` as a module of its own
    (named after the page and line); returns, per file, each reduction's name and lines
    (decorators to the end of the body)."""
    from tests.doc_blocks import blocks

    found: dict[Path, list[tuple[str, int, int]]] = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in blocks(page.read_text()):
            if block.lang != "python" or not _REDUCE.search(block.text):
                continue
            path = folder / f"page_{page.stem}_{block.line}.py"
            path.write_text(block.text)
            found[path] = [
                (node.name, min(d.lineno for d in node.decorator_list), node.end_lineno or node.lineno)
                for node in ast.walk(ast.parse(block.text))
                if isinstance(node, ast.FunctionDef)
                and any(ast.unparse(d).startswith(("reduce(", "fd.reduce(")) for d in node.decorator_list)
            ]
    return found


class Checked(typing.NamedTuple):
    """One checker's run: its exit code, output, errors by file and line, and the inputs."""

    code: int
    out: str
    errors: dict[tuple[str, int], list[str]]
    bad: Path
    pages: dict[Path, list[tuple[str, int, int]]]


def _inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[Path, list[tuple[str, int, int]]]]:
    folder = tmp_path_factory.mktemp("typing")
    (folder / "bad.py").write_text(BAD)
    return folder / "bad.py", page_reductions(folder)


@pytest.fixture(scope="module")
def mypy_strict(tmp_path_factory: pytest.TempPathFactory) -> Checked:
    """One ``mypy --strict`` run over the cases, the bad module and the pages' reductions."""
    bad, pages = _inputs(tmp_path_factory)
    config = bad.parent / "mypy.ini"
    # The pages annotate numpy arrays as a bare np.ndarray, which --strict calls a missing
    # type parameter: numpy's typing, not flowdata's, so it is allowed in the page modules.
    config.write_text("[mypy]\nstrict = True\nignore_missing_imports = True\n\n"
                      "[mypy-page_*]\ndisallow_any_generics = False\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", str(config), "--show-error-codes",
         *map(str, CASE_FILES), str(bad), *map(str, pages)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    out = result.stdout + result.stderr
    errors: dict[tuple[str, int], list[str]] = {}
    for m in re.finditer(r"^(.+?\.py):(\d+): error: (.*)$", out, re.M):
        errors.setdefault((str((ROOT / m.group(1)).resolve()), int(m.group(2))), []).append(m.group(3))
    return Checked(result.returncode, out, errors, bad, pages)


@pytest.fixture(scope="module")
def pyright(tmp_path_factory: pytest.TempPathFactory) -> Checked:
    """One pyright run over the same files."""
    binary = shutil.which("pyright", path=str(Path(sys.executable).parent))
    assert binary is not None, "pyright is installed by scripts/setup.sh"
    bad, pages = _inputs(tmp_path_factory)
    result = subprocess.run(
        [binary, "--pythonpath", sys.executable, *map(str, CASE_FILES), str(bad), *map(str, pages)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    out = result.stdout + result.stderr
    errors: dict[tuple[str, int], list[str]] = {}
    for m in re.finditer(r"^\s*(/.+?\.py):(\d+):\d+ - error: (.*)$", out, re.M):
        errors.setdefault((str(Path(m.group(1)).resolve()), int(m.group(2))), []).append(m.group(3))
    return Checked(result.returncode, out, errors, bad, pages)


@pytest.mark.slow
@pytest.mark.parametrize("checker", ["mypy_strict", "pyright"])
def test_the_cases_type_check(checker: str, request: pytest.FixtureRequest) -> None:
    checked: Checked = request.getfixturevalue(checker)
    cases = {str(p.resolve()) for p in CASE_FILES}
    wrong = {k: v for k, v in checked.errors.items() if k[0] in cases}
    assert not wrong, checked.out
    assert checked.errors, checked.out  # the checker ran and reported the bad module


@pytest.mark.slow
@pytest.mark.parametrize("checker", ["mypy_strict", "pyright"])
def test_every_reduction_of_the_pages_type_checks(checker: str, request: pytest.FixtureRequest) -> None:
    checked: Checked = request.getfixturevalue(checker)
    reductions = [(path, *r) for path, found in checked.pages.items() for r in found]
    assert len(reductions) >= 16, reductions  # every page's @reduce was found
    wrong = [
        f"{path.name}:{line} ({name}): {message}"
        for path, name, first, last in reductions
        for (file, line), messages in checked.errors.items()
        if file == str(path.resolve()) and first <= line <= last
        for message in messages
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_mypy_reports_the_misuse(mypy_strict: Checked) -> None:
    bad = str(mypy_strict.bad.resolve())
    got = {line: messages for (file, line), messages in mypy_strict.errors.items() if file == bad}
    assert mypy_strict.code == 1
    assert sorted(got) == sorted(BAD_ERRORS), mypy_strict.out
    for line, expected in BAD_ERRORS.items():
        assert any(expected in m for m in got[line]), (line, got[line])


@pytest.mark.slow
def test_pyright_reports_the_misuse(pyright: Checked) -> None:
    bad = str(pyright.bad.resolve())
    got = {line: messages for (file, line), messages in pyright.errors.items() if file == bad}
    assert pyright.code == 1
    assert sorted(got) == [7, 11, 19, 20], pyright.out  # a `...` body (line 15) passes pyright
    assert '"__len__" is not present' in pyright.out and 'Cannot access attribute "meen"' in pyright.out


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


def test_the_usage_case_runs() -> None:
    from tests.typing_cases import usage

    assert usage.main() == [
        "[3.0, 3.0] torch.Size([2]) 3 cat [3, 4] 7",
        "(4, 2, 3) [0, 2, 1, 0]",
        "(3, 2, 3) [2, 1, 0]",
        "2 [21, 21] {'row': 14} 1",
        "7 {'label': 0, 'jitter': 0.0} 7",
        "0 2 1 0 2 1 0",
    ]


KINDS = """
from flowdata import Parallel, Sequential


class Shards:
    \"\"\"A stream in shards (num_shards and shard()), as a datasets.IterableDataset is.\"\"\"

    num_shards = 2

    def shard(self, num_shards: int, index: int) -> list[int]:
        return [index, index + 2]

    def __iter__(self):
        return iter([0, 2, 1, 3])


def item(n: int) -> Parallel[int]:
    yield from range(n)


def tick(n: int) -> Sequential[int]:
    yield from range(n)


def row(shards: int) -> Parallel[int]:
    return Shards()


def x(item: int) -> int:
    return item


def t(tick: int) -> int:
    return tick


def r(row: int) -> int:
    return row
"""


def _declared(streaming: bool) -> Any:
    """The return type ``Driver.dataset``'s overloads declare for ``streaming``."""
    import flowdata as fd
    import flowdata.driver
    import flowdata.loader

    for overload in typing.get_overloads(fd.Driver.dataset):
        hints = typing.get_type_hints(overload, vars(flowdata.driver), vars(flowdata.loader))
        if hints["streaming"] == typing.Literal[streaming]:
            return hints["return"]
    raise AssertionError(f"no overload for streaming={streaming}")


def test_the_declared_type_of_dataset_is_what_comes_back(make_module: Any) -> None:
    import flowdata as fd
    from flowdata.loader import LaneDataset, PassDataset, StreamDataset

    assert _declared(False) is PassDataset and _declared(True) == StreamDataset | LaneDataset
    dr = fd.Builder().with_modules(make_module(KINDS)).build()
    ds = dr.dataset(["x"], inputs={"n": 3})
    assert isinstance(ds, _declared(False)) and len(ds) == 3 and ds[2] == {"x": 2}
    for outputs, expected in ((["x"], StreamDataset), (["t"], StreamDataset), (["r"], LaneDataset)):
        stream = dr.dataset(outputs, inputs={"n": 3, "shards": 2}, streaming=True)
        assert type(stream) is expected and isinstance(stream, _declared(True))
        assert not hasattr(stream, "__len__")  # as its type says: a stream has no length
        assert sorted(row[outputs[0]] for row in stream) == ([0, 1, 2] if outputs != ["r"] else [0, 1, 2, 3])


def test_dataset_refuses_a_group_that_can_only_stream_unless_asked(make_module: Any) -> None:
    import flowdata as fd

    dr = fd.Builder().with_modules(make_module(KINDS)).build()
    with pytest.raises(fd.InputError, match=r"(?s)dataset\(\) gives an indexed PassDataset \(len\(ds\), ds\[i\]\) unless "
                                            r"streaming=True, but source 'tick' is a Sequential source.*"
                                            r"fix: dr.dataset\(\.\.\., streaming=True\)"):
        dr.dataset(["t"], inputs={"n": 3})
    with pytest.raises(fd.InputError, match=r"(?s)source 'row' returned a stream in shards \(Shards\): it can only be "
                                            r"streamed.*fix: dr.dataset\(\.\.\., streaming=True\)"):
        dr.dataset(["r"], inputs={"shards": 2})
    with pytest.raises(fd.InputError, match=r"streaming='yes': expected True \(a stream, no len\) or False"):
        dr.dataset(["x"], inputs={"n": 3}, streaming="yes")  # type: ignore[call-overload]


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
