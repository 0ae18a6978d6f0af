"""Authoring: a module and its siblings under the command, private lambdas,
did-you-means for swapped letters and case, a value that contradicts its annotation named
at its node, and the command's fixes as commands."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import flowdata as fd
from flowdata.cli import main
from flowdata.errors import InputLikeNodeWarning

ROOT = Path(__file__).resolve().parents[2]


def _flowdata(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed ``flowdata`` command as a user types it: not ``python -m`` (which puts
    the working directory on sys.path), and from another folder than the module's."""
    script = ("import sys; from flowdata.cli import main; sys.argv[0] = 'flowdata'; "
              "sys.path.pop(0); sys.exit(main())")  # sys.path[0] is the script's folder, as for a console script
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.procs
def test_the_command_imports_a_module_that_imports_its_sibling(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "helpers.py").write_text("def clean(s: str) -> str:\n    return s.strip().lower()\n")
    (project / "pipeline.py").write_text(
        "from flowdata import Collect, Parallel\n"
        "from helpers import clean\n\n"
        "def word(words: list[str]) -> Parallel[str]:\n    yield from words\n\n"
        "def cleaned(word: str) -> str:\n    return clean(word)\n\n"
        "def joined(cleaned: Collect[str]) -> str:\n    return ' '.join(cleaned)\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check = _flowdata("check", str(project / "pipeline.py"), cwd=elsewhere)
    assert (check.returncode, check.stdout, check.stderr) == (0, "ok: 3 nodes, no problems\n", "")
    run = _flowdata("run", str(project / "pipeline.py"), "--outputs", "joined", "--input", 'words=[" A", "B "]',
                    cwd=elsewhere)
    assert (run.returncode, run.stdout, run.stderr) == (0, "joined  'a b'\n", "")
    # The library's path form does the same (as `python pipeline.py` would).
    assert str(project) not in sys.path
    try:
        dr = fd.Builder().with_modules(str(project / "pipeline.py")).build()
        assert dr.execute(["joined"], inputs={"words": ["X "]}) == {"joined": "x"}
    finally:
        sys.path.remove(str(project))
        for name in ("pipeline", "helpers"):
            sys.modules.pop(name, None)


def test_a_private_lambda_is_not_a_node_and_a_public_one_is_named(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Collect, Parallel

    _square = lambda v: v * v

    def item(n: int) -> Parallel[int]:
        yield from range(n)

    def squared(item: int) -> int:
        return _square(item)

    def total(squared: Collect[int]) -> int:
        return sum(squared)
    """)
    assert sorted(dr.nodes) == ["item", "squared", "total"]
    assert dr.execute(["total"], inputs={"n": 4}) == {"total": 14}
    with pytest.raises(fd.GraphError, match=r"^1 problem in the graph:\nFD001 missing-annotation: 'square' is a "
                       r"lambda, which cannot be annotated, so it cannot be a node\n    at .*:2\n(.|\n)*"
                       r"actual:   square = lambda v: \.\.\.\n    fix: write it as 'def square\(\.\.\.\) -> \.\.\.:' "
                       r"with types, or name it '_square' if it is a helper, not a node$"):
        build("""
        square = lambda v: v * v
        def one(n: int) -> int:
            return n
        """)


TYPO = """
from flowdata import Collect, Parallel

def word(words: list[str]) -> Parallel[str]:
    yield from words

def length({param}: str) -> int:
    return len({param})

def total(length: Collect[int]) -> int:
    return sum(length)
"""


@pytest.mark.parametrize("param", ["wrod", "Word", "wodr"])
def test_a_swapped_or_recased_parameter_gets_a_did_you_mean(build: Callable[..., fd.Driver], param: str) -> None:
    with pytest.warns(InputLikeNodeWarning, match=rf"FD401 input-like-a-node: 'length' \(.*:7\) reads '{param}', which "
                      rf"no node makes, so it is an input; did you mean node 'word' \(.*:4\)\?\n  fix: rename the "
                      rf"parameter '{param}' to 'word'"), \
            pytest.raises(fd.GraphError, match=rf"FD202 collect-outside-group: 'total' collects 'length'(.|\n)*fix: "
                          rf"'length' reads '{param}', which no node makes, so it is an input: did you mean node "
                          rf"'word' \(.*:4\)\? rename the parameter '{param}' to 'word'$"):
        build(TYPO.format(param=param))


def test_a_typo_further_up_is_named_in_the_collect_fix(build: Callable[..., fd.Driver]) -> None:
    with pytest.warns(InputLikeNodeWarning), pytest.raises(
            fd.GraphError, match=r"fix: 'length' reads 'Word', which no node makes, so it is an input, and 'double' "
                                 r"reads 'length': did you mean node 'word' \(.*\)\? rename the parameter 'Word' to 'word'"):
        build(TYPO.format(param="Word").replace("def total(length: Collect[int])", """def double(length: int) -> int:
    return 2 * length

def total(double: Collect[int])""").replace("sum(length)", "sum(double)"))


def test_unknown_outputs_and_missing_inputs_see_swaps_and_case(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Collect, Parallel
    def item(count: int) -> Parallel[int]:
        yield from range(count)
    def total(item: Collect[int]) -> int:
        return sum(item)
    """)
    with pytest.raises(fd.InputError, match=r"unknown output 'Total' \(did you mean 'total'\?\)"):
        dr.execute(["Total"], inputs={"count": 2})
    with pytest.raises(fd.InputError, match=r"'count': read by item \(.*\) \(did you mean the input 'conut' you gave\?\)"), \
            pytest.warns(fd.errors.UnreadInputWarning, match=r"input 'conut' \(did you mean 'count'\?\)"):
        dr.execute(["total"], inputs={"conut": 2})


CONTRADICTION = """
from flowdata import Collect, {kind}

def word(words: list[str]) -> {kind}[str]:
    yield from words

def length(word: str) -> int:
    return word.upper() if word != "ok" else 2

def longer(length: int) -> int:
    return length + 1

def total(longer: Collect[int]) -> int:
    return sum(longer)
"""


@pytest.mark.parametrize("kind", ["Parallel", "Sequential"])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_value_that_contradicts_its_annotation_is_named_at_its_node(
    build: Callable[..., fd.Driver], kind: str, on_error: str
) -> None:
    # Before: "TypeError: can only concatenate str (not "int") to str" in 'longer', the
    # consumer. Now the node whose value it is, with its line, the declared and the actual
    # type -- under on_error="skip" too: it is the node's fault, not a sample's.
    dr = build(CONTRADICTION.format(kind=kind))
    want = (r"node 'length' \(.*:7\) failed on sample 0 of group 'word' \(pass 1, worker main\): ReturnTypeError: "
            r"'length' is declared '-> int', but returned str 'A'; its consumers were checked against int -- fix: "
            r"make 'length' return int, or correct its annotation \(to str\?\)")
    with pytest.raises(fd.SampleError, match=want):
        dr.execute(["total"], inputs={"words": ["a", "b"]}, on_error=on_error)
    with pytest.raises(fd.SampleError, match=want):
        list(dr.dataloader(["longer"], inputs={"words": ["a", "b"]}, batch_size=2, on_error=on_error))
    with pytest.raises(fd.SampleError, match=want.replace("sample 0", "sample 1").replace("'A'", "'B'")):
        dr.run_sample(["longer"], index=1, inputs={"words": ["ok", "b"]})
    # A value that fits its annotation passes.
    assert dr.run_sample(["longer"], index=0, inputs={"words": ["ok"]}) == {"longer": 3}


def test_once_and_collect_values_are_checked_against_their_annotations(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    import numpy as np
    from flowdata import Collect, Parallel

    def limit(n: int) -> int:
        return str(n)

    def item(n: int) -> Parallel[int]:
        yield from range(n)

    def total(item: Collect[int]) -> float:
        return [sum(item)]

    def mean(item: Collect[int]) -> float:
        return np.float32(sum(item)) / len(list(item)) if False else np.mean(list(item))

    def count(item: Collect[int]) -> int | None:
        return None
    """)
    with pytest.raises(fd.NodeError, match=r"node 'limit' \(.*:5\) failed: ReturnTypeError: 'limit' is declared "
                       r"'-> int', but returned str '3'"):
        dr.execute(["limit"], inputs={"n": 3})
    with pytest.raises(fd.NodeError, match=r"node 'total' \(.*:11\) failed: ReturnTypeError: 'total' is declared "
                       r"'-> float', but returned list \[3\]"):
        dr.execute(["total"], inputs={"n": 3})
    # numpy's scalars are numbers, None fits Optional: not contradictions.
    assert dr.execute(["mean", "count"], inputs={"n": 3}) == {"mean": 1.0, "count": None}


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    path = tmp_path / "shell_flow.py"
    path.write_text(
        "from flowdata import Parallel\n\n"
        "def value(n: int) -> Parallel[float]:\n    yield from (float(i) for i in range(n))\n\n"
        "def double(value: float, scale: float = 2.0) -> float:\n"
        "    if value == 2:\n        raise ValueError('two')\n"
        "    return value * scale\n"
    )
    return path


def test_the_command_prints_its_fixes_as_commands(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sample", str(flow), "--outputs", "double", "--index", "2", "--input", "n=5",
                 "--input", "scale=3 "]) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"    fix: reproduce it alone with flowdata sample {flow} --outputs double --index 2 "
                        "--input n=5 --input 'scale=3 '\n")
    assert main(["run", str(flow), "--outputs", "double", "--input", "n=5"]) == 1
    err = capsys.readouterr().err
    assert (f"or use flowdata sample {flow} --outputs double --index 0 --input n=5 to inspect one sample" in err
            and "and flowdata run prints whole values" in err and "driver." not in err)
    assert main(["sample", str(flow), "--outputs", "double"]) == 1
    assert capsys.readouterr().err.endswith("  fix: add --input n=...\n")
    # The library keeps its Python form.
    dr = fd.Builder().with_modules(str(flow)).build()
    with pytest.raises(fd.SampleError, match=r"fix: reproduce it alone with driver\.run_sample\(\['double'\], "
                       r"index=2, inputs=<the same inputs>\)"):
        dr.run_sample(["double"], index=2, inputs={"n": 5})


def test_past_the_end_says_how_many_samples_there_are(flow: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sample", str(flow), "--outputs", "double", "--index", "9", "--input", "n=5"]) == 1
    assert capsys.readouterr().err == ("flowdata: InputError: source 'value' has no sample 9: it has 5 samples "
                                       "(indices 0 to 4)\n  fix: ask for an index from 0 to 4\n")
    dr = fd.Builder().with_modules(str(flow)).build()
    with pytest.raises(fd.InputError, match=r"source 'value' has no sample 1: it has 1 sample \(indices 0 to 0\)"):
        dr.run_sample(["double"], index=1, inputs={"n": 1})
    with pytest.raises(fd.InputError, match=r"source 'value' has no sample 0: it yields no samples with these inputs"):
        dr.run_sample(["double"], index=0, inputs={"n": 0})
