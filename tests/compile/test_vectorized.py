"""@vectorized: a per-sample node called once per chunk (a loader batch), on lists -- same
values as a per-sample node, failures found on their sample, and build-time checks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import flowdata as fd

FLOW = """
import os
from collections.abc import Sequence

import torch
from flowdata import Collect, Parallel, Sequential, reduce, vectorized
from flowdata.stats import Stats, Welford

CALLS = []  # the chunk sizes each call of 'scaled' got (in this process)


def row(n: int) -> Parallel[int]:
    yield from range(n)


def value(row: int) -> float:
    if row == BAD:
        raise ValueError(f"row {row} is bad")
    return float(row) ** 0.5


BAD = -1


@vectorized
def scaled(value: Sequence[float], row: Sequence[int], factor: float = 2.0) -> list[float]:
    CALLS.append(len(value))
    with open(os.environ["FD_VEC_LOG"], "a") as f:
        f.write(f"{os.getpid()} {len(value)}\\n")
    return [v * factor + r for v, r in zip(value, row)]


@vectorized
def pair(scaled: Sequence[float], sample_index: Sequence[int]) -> torch.Tensor:
    # A batched tensor: flowdata splits it along its first dimension, one row per sample.
    return torch.stack([torch.tensor(scaled, dtype=torch.float64), torch.tensor(sample_index, dtype=torch.float64)], 1)


@reduce(Welford)
def scaled_stats(scaled: Collect[float]) -> Stats: ...


def centred(scaled: float, scaled_stats: Stats) -> float:
    return scaled - float(scaled_stats.mean)


def total(scaled: Collect[float]) -> float:
    return sum(scaled)
"""

PLAIN = FLOW.replace("@vectorized\n", "").replace(
    "def scaled(value: Sequence[float], row: Sequence[int], factor: float = 2.0) -> list[float]:\n"
    "    CALLS.append(len(value))", "def scaled(value: float, row: int, factor: float = 2.0) -> float:\n"
    "    value, row = [value], [row]\n    CALLS.append(1)").replace(
    "    return [v * factor + r for v, r in zip(value, row)]", "    return [v * factor + r for v, r in zip(value, row)][0]").replace(
    "def pair(scaled: Sequence[float], sample_index: Sequence[int]) -> torch.Tensor:",
    "def pair(scaled: float, sample_index: int) -> torch.Tensor:").replace(
    "torch.stack([torch.tensor(scaled, dtype=torch.float64), torch.tensor(sample_index, dtype=torch.float64)], 1)",
    "torch.tensor([scaled, sample_index], dtype=torch.float64)")


@pytest.fixture(autouse=True)
def _log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "calls.log"
    path.write_text("")
    monkeypatch.setenv("FD_VEC_LOG", str(path))
    return path


def _calls(log: Path) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in (line.split() for line in log.read_text().split("\n") if line)]


@pytest.mark.procs
def test_the_values_equal_a_per_sample_node_and_a_loader_batch_is_one_call(
    build: Callable[..., fd.Driver], _log: Path
) -> None:
    vec, plain = build(FLOW), build(PLAIN)
    want = plain.execute(["total", "scaled_stats"], inputs={"n": 100})
    got = vec.execute(["total", "scaled_stats"], inputs={"n": 100})
    assert got["total"] == want["total"] and torch.equal(got["scaled_stats"].mean, want["scaled_stats"].mean)
    outputs = ["scaled", "centred", "pair"]
    batches = {}
    for workers in (0, 2):
        _log.write_text("")
        loader = vec.dataloader(outputs, inputs={"n": 100}, batch_size=16, num_workers=workers)
        batches[workers] = list(loader)
        epoch = _calls(_log)[-7:]  # the statistics pass (pass 1) called it too, in chunks
        assert sorted(size for _, size in epoch) == [4] + [16] * 6, epoch  # one call per batch (in any order)
        if workers:
            assert {pid for pid, _ in epoch} != {__import__("os").getpid()}  # called in the workers
    baseline = list(plain.dataloader(outputs, inputs={"n": 100}, batch_size=16))
    for run in batches.values():
        for b, w in zip(run, baseline, strict=True):
            assert all(torch.equal(b[k], w[k]) for k in outputs)
    assert batches[0][0]["pair"].shape == (16, 2) and batches[0][0]["pair"][:, 1].tolist() == list(range(16))


def test_a_failing_sample_is_found_and_named_and_skip_leaves_out_only_it(
    build: Callable[..., fd.Driver], _log: Path
) -> None:
    dr = build(FLOW.replace("BAD = -1", "BAD = 37").replace(
        "    CALLS.append(len(value))", "    CALLS.append(len(value))\n    if 13 in row:\n        raise KeyError('thirteen')"))
    with pytest.raises(fd.SampleError, match=r"node 'scaled' \(.*:\d+\) failed on sample 13 of group 'row' "
                       r"\(pass 1, worker main\): KeyError: 'thirteen'\n    item: 13"):
        dr.execute(["total"], inputs={"n": 50})
    report = fd.Report()
    out = dr.execute(["total"], inputs={"n": 50}, on_error="skip", report=report)
    assert sorted((s.index, s.node) for s in report.skipped) == [(13, "scaled"), (37, "value")]
    assert out["total"] == pytest.approx(sum(2 * i**0.5 + i for i in range(50) if i not in (13, 37)))
    loader = dr.dataloader(["scaled"], inputs={"n": 50}, batch_size=10, on_error="skip")
    delivered = torch.cat([b["scaled"] for b in loader])
    assert len(delivered) == 48 and sorted(s.index for s in loader.report.skipped) == [13, 37]


def test_a_wrong_number_of_values_is_an_error_naming_the_node(build: Callable[..., fd.Driver]) -> None:
    dr = build(FLOW.replace("    return [v * factor + r for v, r in zip(value, row)]", "    return [0.0, 1.0]"))
    with pytest.raises(fd.SampleError, match=r"node 'scaled' .* failed on sample 0 .*ReturnTypeError: @vectorized "
                       r"node 'scaled' returned 2 values for 5 samples; it must return one value per sample, in order"
                       r" -- fix: return one value per sample of the lists it is given \(5 here\)"):
        dr.dataloader(["scaled"], inputs={"n": 5}, batch_size=5).__iter__().__next__()
    dr = build(FLOW.replace("    return [v * factor + r for v, r in zip(value, row)]", "    return 3.0"))
    with pytest.raises(fd.SampleError, match=r"ReturnTypeError: @vectorized node 'scaled' returned float, not a "
                       r"sequence with one value per sample"):
        dr.run_sample(["scaled"], index=2, inputs={"n": 5})


def test_a_wrong_count_for_a_chunk_is_not_hidden_behind_the_per_sample_path(
    build: Callable[..., fd.Driver], _log: Path
) -> None:
    # Right for one sample, wrong for several: it used to be rerun one sample at a time,
    # silently; it is an error naming the node, under on_error="skip" too (a fault of the
    # node, not of a sample: skipping would leave out one sample per chunk, silently).
    dr = build(FLOW.replace("    return [v * factor + r for v, r in zip(value, row)]",
                            "    return [v * factor + r for v, r in zip(value, row)][:1]"))
    for on_error in ("raise", "skip"):
        with pytest.raises(fd.SampleError, match=r"node 'scaled' \(.*:\d+\) failed on sample 0 of group 'row' .*"
                           r"ReturnTypeError: @vectorized node 'scaled' returned 1 value for 4 samples"):
            list(dr.dataloader(["scaled"], inputs={"n": 8}, batch_size=4, on_error=on_error))
    assert dr.run_sample(["scaled"], index=3, inputs={"n": 8}) == {"scaled": pytest.approx(2 * 3**0.5 + 3)}


def test_sequential_sources_run_sample_and_timeouts_call_it_one_sample_at_a_time(
    build: Callable[..., fd.Driver], _log: Path
) -> None:
    dr = build(FLOW.replace("-> Parallel[int]", "-> Sequential[int]"))
    assert dr.execute(["total"], inputs={"n": 6})["total"] == pytest.approx(sum(2 * i**0.5 + i for i in range(6)))
    assert {size for _, size in _calls(_log)} == {1}
    assert dr.run_sample(["scaled", "pair"], index=3, inputs={"n": 6})["pair"].tolist() == [2 * 3**0.5 + 3, 3.0]
    _log.write_text("")
    par = build(FLOW)
    assert par.execute(["total"], inputs={"n": 40}, timeout=5.0)["total"] == pytest.approx(
        sum(2 * i**0.5 + i for i in range(40)))
    assert [size for _, size in _calls(_log)] == [1] * 40  # each call bounded by the timeout, like any node's


@pytest.mark.parametrize(("change", "message"), [
    (("def scaled(value: Sequence[float], row: Sequence[int], factor: float = 2.0) -> list[float]:",
      "def scaled(value: float, row: Sequence[int], factor: float = 2.0) -> list[float]:"),
     r"FD103 vectorized-parameter: 'scaled' is @vectorized, so 'value' receives a list of the chunk's values "
     r"\(one float per sample\), but it is declared as float\n    at .*:\d+\n    at .*:\d+\n"
     r"    expected: value: Sequence\[float\]\n    actual:   value: float\n"
     r"    fix: annotate the parameter as 'value: Sequence\[float\]' \(or list\[float\]\)"),
    (("factor: float = 2.0) -> list[float]:", "factor: float = 2.0) -> float:"),
     r"FD008 vectorized-return: 'scaled' is @vectorized, so it returns one value per sample of a chunk, but its "
     r"return is declared as float\n.*\n    expected: a list or Sequence of the per-sample type.*\n"
     r"    actual:   -> float\n    fix: declare '-> list\[float\]'"),
    (("def total(scaled: Collect[float]) -> float:", "@vectorized\ndef total(scaled: Collect[float]) -> float:"),
     r"FD209 vectorized-not-per-sample: 'total' is @vectorized, but it is a collect node: only a per-sample node "
     r"is called on a chunk of samples\n.*\n    expected: a per-sample node\n    actual:   a collect node\n"
     r"    fix: drop @vectorized, or make it read a per-sample value of a group"),
])
def test_build_time_checks(build: Callable[..., fd.Driver], change: tuple[str, str], message: str) -> None:
    with pytest.raises(fd.GraphError, match=message):
        build(FLOW.replace(*change))


@pytest.mark.procs
def test_mypy_checks_the_body_as_written(tmp_path: Path) -> None:
    source = tmp_path / "vec_flow.py"
    source.write_text(
        "from collections.abc import Sequence\n\nfrom flowdata import Parallel, vectorized\n\n\n"
        "def row(n: int) -> Parallel[int]:\n    yield from range(n)\n\n\n"
        "@vectorized\ndef half(row: Sequence[int]) -> list[float]:\n    return [r * 0.5 for r in row]\n\n\n"
        "@vectorized\ndef broken(row: Sequence[int]) -> list[str]:\n    return [r + 1 for r in row]\n\n\n"
        "reveal_type(half)\n")
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
                         capture_output=True, text=True, check=False, cwd=tmp_path)
    assert 'vec_flow.py:17: error: List comprehension has incompatible type List[int]; expected List[str]' in run.stdout, \
        run.stdout
    assert 'Revealed type is "def (row: typing.Sequence[int]) -> list[float]"' in run.stdout
    assert run.stdout.count("error:") == 1, run.stdout  # the decorator keeps the signature; 'half' checks clean
