"""execute() semantics: lazy Collect, lockstep, one shared pass, early stop, errors, executors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import traceback
import time
import tracemalloc
from pathlib import Path
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import pytest

import flowdata as fd
from flowdata.run.executors.worker import run_task

T = TypeVar("T")
R = TypeVar("R")

COUNTING = """
from flowdata import Parallel, Collect
CALLS = {"item": 0, "square": 0, "shifted": 0}
def item(n: int) -> Parallel[int]:
    for i in range(n):
        CALLS["item"] += 1
        yield i
def square(item: int) -> int:
    CALLS["square"] += 1
    return item * item
def shifted(square: int) -> int:
    CALLS["shifted"] += 1
    return square + 1
def total(shifted: Collect[int]) -> int:
    return sum(shifted)
def biggest(shifted: Collect[int]) -> int:
    return max(shifted)
def squares(square: Collect[int]) -> list[int]:
    return list(square)
def mean(total: int, n: int) -> float:
    return total / n
def centered(shifted: int, mean: float) -> float:
    return shifted - mean
def centered_sum(centered: Collect[float]) -> float:
    return sum(centered)
"""


def test_collect_nodes_of_one_group_share_one_pass(make_module: Callable[[str], Any]) -> None:
    m = make_module(COUNTING)
    dr = fd.Builder().with_modules(m).build()
    out = dr.execute(["total", "biggest", "squares"], inputs={"n": 100})
    assert out == {
        "total": sum(i * i + 1 for i in range(100)),
        "biggest": 99 * 99 + 1,
        "squares": [i * i for i in range(100)],
    }
    assert m.CALLS == {"item": 100, "square": 100, "shifted": 100}


def test_each_node_only_in_the_pass_that_needs_it(make_module: Callable[[str], Any]) -> None:
    m = make_module(COUNTING)
    dr = fd.Builder().with_modules(m).build()
    plan = dr.plan(["centered_sum", "squares"], inputs=["n"])
    group = plan.group("item")
    assert [(p.number, p.computes, p.feeds) for p in group.passes] == [
        (1, ("square", "shifted"), ("total", "squares")),
        (2, ("square", "shifted", "centered"), ("centered_sum",)),
    ]
    out = dr.execute(["centered_sum", "squares"], inputs={"n": 10})
    assert out["centered_sum"] == pytest.approx(0.0)
    # Two passes over 10 samples; 'centered' only in pass 2.
    assert m.CALLS == {"item": 20, "square": 20, "shifted": 20}


def test_collect_receives_values_in_sample_order(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel, Collect
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def label(item: int) -> str:
        return f"s{item}"
    def streamed(label: Collect[str]) -> list[str]:
        return [x for x in label]  # consumed once, on the spot: a lazy stream
    def listed(label: Collect[str]) -> list[str]:
        return label  # kept: a list
    """)
    got = dr.execute(["streamed", "listed"], inputs={"n": 2000}, executor="processes", chunk_size=7)
    assert got["streamed"] == got["listed"] == [f"s{i}" for i in range(2000)]
    assert type(got["listed"]) is list


def test_endless_sequential_stops_when_collect_stops(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Sequential, Collect
    PULLED = []
    def reading(start: float) -> Sequential[float]:
        x = start
        while True:
            PULLED.append(x)
            yield x
            x += 1.0
    def doubled(reading: float) -> float:
        return reading * 2
    def steps_until(doubled: Collect[float], threshold: float) -> int:
        running = 0.0
        for i, d in enumerate(doubled):
            running += d
            if running > threshold:
                return i
        return -1
    """)
    out = dr.execute(["steps_until"], inputs={"start": 0.0, "threshold": 1000.0})
    # running sum of 2*i crosses 1000 at i = 32 (2 * 32*33/2 = 1056)
    assert out == {"steps_until": 32}
    pulled = sys.modules[dr.modules[0].__name__].PULLED
    assert 33 <= len(pulled) <= 33 + 8  # bounded read-ahead, then the source is closed


def test_parallel_early_stop_drops_pending_work(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel, Collect
    PULLED = []
    def item(n: int) -> Parallel[int]:
        for i in range(n):
            PULLED.append(i)
            yield i
    def first_three(item: Collect[int]) -> list[int]:
        out = []
        for x in item:
            out.append(x)
            if len(out) == 3:
                break
        return out
    """)
    with fd.ProcessExecutor(num_workers=2) as ex:
        assert dr.execute(["first_three"], inputs={"n": 10**9}, executor=ex) == {"first_three": [0, 1, 2]}
    assert len(sys.modules[dr.modules[0].__name__].PULLED) < 10_000


def test_sequential_memory_does_not_grow_with_samples(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Sequential, Collect
    def blob(n: int) -> Sequential[bytes]:
        for i in range(n):
            yield bytes([i % 256]) * 1_000_000
    def size(blob: bytes) -> int:
        return len(blob)
    def total(size: Collect[int]) -> int:
        return sum(size)
    def first_bytes(blob: Collect[bytes]) -> int:
        return sum(b[0] for b in blob)
    """)

    def peak(n: int) -> int:
        tracemalloc.start()
        try:
            out = dr.execute(["total", "first_bytes"], inputs={"n": n})
            assert out["total"] == n * 1_000_000
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(20), peak(200)
    # 200 MB flowed through; peak stays at a few items whatever n is.
    assert large < 12_000_000
    assert large < small + 4_000_000


def test_lockstep_parameters(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel, Collect
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def x(item: int) -> float:
        return float(item)
    def y(item: int) -> float:
        return 2.0 * item + 1.0
    def fit(x: Collect[float], y: Collect[float]) -> tuple[float, float]:
        xs, ys = list(x), list(y)   # consumed one after the other: still aligned
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
        return slope, my - slope * mx
    """)
    assert dr.execute(["fit"], inputs={"n": 1500}, executor="processes") == {"fit": (2.0, 1.0)}


def test_per_sample_output_is_an_input_error(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def square(item: int) -> int:
        return item * item
    """)
    with pytest.raises(fd.InputError, match=r"(?s)'square' \(.*:5\) is per-sample in group 'item'.*fix: add a Collect node, e.g. 'def all_square\(square: Collect\[int\]\) -> list\[int\]: return list\(square\)', or use driver.run_sample\(\['square'\], index=0\) to inspect one sample"):
        dr.execute(["square"], inputs={"n": 3})


def test_unknown_output_suggests_a_name(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    def total(x: int) -> int:
        return x
    """)
    with pytest.raises(fd.InputError, match=r"unknown output 'totl' \(did you mean 'total'\?\)"):
        dr.execute(["totl"], inputs={"x": 1})


def test_missing_input_lists_every_reader(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    def a(x: int, y: int) -> int:
        return x + y
    def b(x: int, z: int = 3) -> int:
        return x * z
    """)
    with pytest.raises(fd.InputError, match=r"missing inputs 'x', 'y':\n  'x': read by a \(.*:2\), b \(.*:4\)\n  'y': read by a"):
        dr.execute(["a", "b"])
    assert dr.execute(["b"], inputs={"x": 2}) == {"b": 6}


def test_config_values_are_inputs(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    def scaled(x: int, scale: int) -> int:
        return x * scale
    """, {"scale": 10})
    assert dr.execute(["scaled"], inputs={"x": 4}) == {"scaled": 40}


def test_overrides_skip_upstream_work(make_module: Callable[[str], Any]) -> None:
    m = make_module(COUNTING)
    dr = fd.Builder().with_modules(m).build()
    assert dr.execute(["mean"], inputs={"n": 4}, overrides={"total": 40}) == {"mean": 10.0}
    assert m.CALLS == {"item": 0, "square": 0, "shifted": 0}
    with pytest.raises(fd.InputError, match=r"cannot override 'square': it is per-sample in group 'item'"):
        dr.execute(["total"], inputs={"n": 4}, overrides={"square": 1})


def test_run_sample(make_module: Callable[[str], Any]) -> None:
    m = make_module(COUNTING)
    dr = fd.Builder().with_modules(m).build()
    assert dr.run_sample(["square", "shifted"], item=7) == {"square": 49, "shifted": 50}
    assert dr.run_sample(["shifted"], index=3, inputs={"n": 10}) == {"shifted": 10}
    # A pass-2 node: the statistics of pass 1 are computed first.
    mean = sum(i * i + 1 for i in range(10)) / 10
    assert dr.run_sample(["centered"], index=2, inputs={"n": 10}) == {"centered": pytest.approx(5 - mean)}
    with pytest.raises(fd.InputError, match=r"source 'item' has no sample 50: it has 10 samples \(indices 0 to 9\)\n  fix: ask for an index from 0 to 9"):
        dr.run_sample(["square"], index=50, inputs={"n": 10})
    with pytest.raises(fd.InputError, match=r"run_sample\(\) runs per-sample nodes, but 'total' is a whole value"):
        dr.run_sample(["total"], inputs={"n": 10})


def test_sample_builtins(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    import torch
    from flowdata import Parallel, Collect
    def item(n: int) -> Parallel[str]:
        for i in range(n):
            yield f"x{i}"
    def noisy(item: str, sample_index: int, sample_rng: torch.Generator) -> tuple[int, float]:
        return sample_index, float(torch.rand(1, generator=sample_rng))
    def all_noise(noisy: Collect[tuple[int, float]]) -> list[tuple[int, float]]:
        return list(noisy)
    """)
    inline = dr.execute(["all_noise"], inputs={"n": 50})["all_noise"]
    procs = dr.execute(["all_noise"], inputs={"n": 50}, executor="processes", chunk_size=4)["all_noise"]
    assert [i for i, _ in inline] == list(range(50))
    assert inline == procs  # randomness depends on the sample, not on the worker
    assert len({v for _, v in inline}) == 50


FAILING = """
from flowdata import Parallel, Collect
def item(n: int) -> Parallel[str]:
    for i in range(n):
        yield f"file-{i}.wav"
def decoded(item: str) -> int:
    if item == "file-13.wav":
        raise ValueError("corrupt header")
    return len(item)
def total(decoded: Collect[int]) -> int:
    return sum(decoded)
"""


@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_sample_error_names_node_sample_and_group(make_module: Callable[[str], Any], executor: str) -> None:
    m = make_module(FAILING)
    dr = fd.Builder().with_modules(m).build()
    pattern = (
        r"node 'decoded' \(.*:6\) failed on sample 13 of group 'item' \(pass 1, worker (main|pid \d+)\): "
        r"ValueError: corrupt header\n    item: 'file-13.wav'\n"
        r"    fix: reproduce it alone with driver.run_sample\(\['decoded'\], index=13, inputs=<the same inputs>\)"
    )
    with pytest.raises(fd.SampleError, match=pattern) as info:
        dr.execute(["total"], inputs={"n": 40}, executor=executor, chunk_size=5)
    err = info.value
    assert (err.node, err.index, err.group, err.pass_) == ("decoded", 13, "item", 1)
    assert err.worker == "main" if executor == "inline" else err.worker.startswith("pid ")
    assert isinstance(err.__cause__, ValueError)
    if executor == "inline":
        frames = traceback.extract_tb(err.__cause__.__traceback__)
        assert frames[0].name == "decoded"  # the user's frame comes first
        assert all("flowdata" not in f.filename for f in frames)
    else:
        assert "traceback in worker" in "".join(getattr(err.__cause__, "__notes__", []))
    # The error the user sees starts at their call, not deep inside the scheduler.
    assert len(traceback.extract_tb(err.__traceback__)) <= 3


def test_errors_pickle() -> None:
    import pickle

    err = fd.SampleError("n", "m.py:3", "ValueError: x", index=4, item="'a'", group="g", pass_=2, worker="main")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.index == 4
    gerr = fd.GraphError([fd.GraphProblem("FD101", "type-mismatch", "msg", "n")])
    assert pickle.loads(pickle.dumps(gerr)).codes == ["FD101"]


def test_once_and_collect_node_errors(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel, Collect
    def ratio(a: int, b: int) -> float:
        return a / b
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def picky(item: Collect[int]) -> int:
        for x in item:
            if x == 5:
                raise KeyError("five")
        return 0
    def other(item: Collect[int]) -> int:
        return sum(item)
    """)
    with pytest.raises(fd.NodeError, match=r"node 'ratio' \(.*:3\) failed: ZeroDivisionError: division by zero"):
        dr.execute(["ratio"], inputs={"a": 1, "b": 0})
    with pytest.raises(fd.NodeError, match=r"node 'picky' \(.*:7\) failed: KeyError: 'five'"):
        dr.execute(["picky", "other"], inputs={"n": 100})


def test_source_must_return_an_iterable(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel, Collect
    def item(n: int) -> Parallel[int]:
        return n  # type: ignore
    def total(item: Collect[int]) -> int:
        return sum(item)
    """)
    with pytest.raises(fd.NodeError, match=r"node 'item' \(.*:3\) failed: a source must return an iterable of samples, got int"):
        dr.execute(["total"], inputs={"n": 3})


def test_sequential_runs_in_order_in_the_main_process(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    import os
    from flowdata import Sequential, Collect
    def step(n: int) -> Sequential[int]:
        yield from range(n)
    def where(step: int) -> tuple[int, int]:
        return step, os.getpid()
    def trace(where: Collect[tuple[int, int]]) -> list[tuple[int, int]]:
        return list(where)
    """)
    out = dr.execute(["trace"], inputs={"n": 30}, executor="processes")["trace"]
    assert out == [(i, os.getpid()) for i in range(30)]


class RecordingExecutor:
    """Test double of the executor contract: runs tasks inline and records them."""

    def __init__(self) -> None:
        self.tasks = 0

    def map(self, fn: Callable[[Any, T], R], tasks: Iterable[T], *, context: Any) -> Iterator[R]:
        for task in tasks:
            self.tasks += 1
            yield fn(context, task)


def test_executor_contract_and_chunking(make_module: Callable[[str], Any]) -> None:
    m = make_module(COUNTING)
    dr = fd.Builder().with_modules(m).build()
    ex = RecordingExecutor()
    out = dr.execute(["total"], inputs={"n": 5000}, executor=ex)
    assert out == {"total": sum(i * i + 1 for i in range(5000))}
    assert 1 <= ex.tasks <= 100  # chunks, not one task per sample


def test_unknown_executor(build: Callable[..., fd.Driver]) -> None:
    dr = build("def a(x: int) -> int:\n    return x\n")
    with pytest.raises(fd.FlowdataError, match=r"unknown executor 'threads'"):
        dr.execute(["a"], inputs={"x": 1}, executor="threads")
    with pytest.raises(fd.FlowdataError, match=r"has no map\(fn, tasks, \*, context\) method"):
        dr.execute(["a"], inputs={"x": 1}, executor=object())


def test_spawn_start_method() -> None:
    from tests.dataflows import two_pass

    dr = fd.Builder().with_modules(two_pass).build()
    inputs = two_pass.CASES[2]
    with fd.ProcessExecutor(num_workers=2, start_method="spawn") as ex:
        got = dr.execute(two_pass.OUTPUTS, inputs=inputs, executor=ex)
    assert got == two_pass._oracle(**inputs)


def test_worker_task_is_module_level() -> None:
    import pickle

    assert pickle.loads(pickle.dumps(run_task)) is run_task


def test_parallel_memory_is_bounded_for_large_samples(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel, Collect
    def blob(n: int) -> Parallel[bytes]:
        for i in range(n):
            yield bytes([i % 256]) * 1_000_000
    def head(blob: bytes) -> int:
        return blob[0]
    def total(head: Collect[int]) -> int:
        return sum(head)
    def size(blob: Collect[bytes]) -> int:
        return sum(len(b) for b in blob)
    """)
    tracemalloc.start()
    try:
        out = dr.execute(["total", "size"], inputs={"n": 300})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out == {"total": sum(i % 256 for i in range(300)), "size": 300_000_000}
    # Chunks are capped at about 8 MB: a few chunks in flight, not the 300 MB that passed.
    assert peak < 60_000_000


def test_error_in_source_is_the_sources_error(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Parallel, Collect
    def item(n: int) -> Parallel[int]:
        for i in range(n):
            if i == 4:
                raise OSError("disk gone")
            yield i
    def total(item: Collect[int]) -> int:
        return sum(item)
    """)
    with pytest.raises(fd.NodeError, match=r"node 'item' \(.*:3\) failed: OSError: disk gone \(while producing sample 4\)") as info:
        dr.execute(["total"], inputs={"n": 10})
    frames = traceback.extract_tb(info.value.__cause__.__traceback__)
    assert [f.name for f in frames] == ["item"]


def test_input_asked_as_output(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    def a(x: int, seed: int = 3) -> int:
        return x + seed
    """)
    with pytest.raises(fd.InputError, match=r"'seed' is an input of the graph, not a node"):
        dr.execute(["seed"], inputs={"x": 1})
    assert dr.execute(["seed", "a"], inputs={"x": 1, "seed": 5}) == {"seed": 5, "a": 6}


def test_overridden_statistics_need_no_extra_pass(make_module: Callable[[str], Any]) -> None:
    m = make_module(COUNTING)
    dr = fd.Builder().with_modules(m).build()
    plan = dr.plan(["centered_sum"], inputs=["n"], overrides={"mean": 0.0})
    assert [p.number for p in plan.group("item").passes] == [1]
    assert dr.execute(["centered_sum"], inputs={"n": 3}, overrides={"mean": 0.0}) == {"centered_sum": 1 + 2 + 5}
    assert m.CALLS["square"] == 3


def test_unread_input_warns_with_a_suggestion(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    def a(x: int, scale: int = 1) -> int:
        return x * scale
    """)
    with pytest.warns(UserWarning, match=r"input 'scal' \(did you mean 'scale'\?\) not read by any node"):
        assert dr.execute(["a"], inputs={"x": 2, "scal": 10}) == {"a": 2}


def test_input_named_like_a_node_replaces_it(make_module: Callable[[str], Any]) -> None:
    m = make_module(COUNTING)
    dr = fd.Builder().with_modules(m).build()
    assert dr.execute(["mean"], inputs={"n": 4, "total": 8}) == {"mean": 2.0}
    assert m.CALLS["square"] == 0
    with pytest.raises(fd.InputError, match=r"cannot override 'square'"):
        dr.execute(["total"], inputs={"n": 4, "square": 1})


def test_run_sample_item_of_a_later_pass_needs_the_sources_inputs(make_module: Callable[[str], Any]) -> None:
    m = make_module(COUNTING)
    dr = fd.Builder().with_modules(m).build()
    with pytest.raises(fd.InputError, match=r"missing input 'n'"):
        dr.run_sample(["centered"], item=3)
    mean = sum(i * i + 1 for i in range(4)) / 4
    assert dr.run_sample(["centered"], item=3, inputs={"n": 4}) == {"centered": 10 - mean}


SKIPPY = """
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Count
CALLS = {"checked": 0}
def item(n: int) -> Parallel[int]:
    yield from range(n)
def checked(item: int) -> int:
    CALLS["checked"] += 1
    if item % 10 == 3:
        raise ValueError(f"bad {item}")
    return item
def total(checked: Collect[int]) -> int:
    return sum(checked)
@reduce(Count)
def count(checked: Collect[int]) -> int: ...
def mean(total: int, count: int) -> float:
    return total / count
def centered(item: int, mean: float) -> float:
    return item - mean
@reduce(Count)
def n_centered(centered: Collect[float]) -> int: ...
"""


@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_skip_leaves_bad_samples_out_of_every_pass(make_module: Callable[[str], Any], executor: str, caplog: pytest.LogCaptureFixture) -> None:
    m = make_module(SKIPPY)
    dr = fd.Builder().with_modules(m).build()
    report = fd.Report()
    out = dr.execute(["total", "count", "n_centered"], inputs={"n": 100}, on_error="skip", report=report, executor=executor, chunk_size=16)
    good = [i for i in range(100) if i % 10 != 3]
    # 'centered' itself never fails, yet the samples skipped in pass 1 are left out of pass 2.
    assert out == {"total": sum(good), "count": 90, "n_centered": 90}
    assert [s.index for s in report.skipped] == [i for i in range(100) if i % 10 == 3]
    first = report.skipped[0]
    assert (first.node, first.item, first.error, first.group, first.pass_) == ("checked", "3", "ValueError: bad 3", "item", 1)
    assert report.node_calls["checked"] >= 90 and report.node_seconds["checked"] >= 0.0
    assert any("skipped sample 3 (3) at node 'checked': ValueError: bad 3" in r.getMessage() for r in caplog.records)


def test_too_many_skipped(make_module: Callable[[str], Any]) -> None:
    dr = fd.Builder().with_modules(make_module(SKIPPY)).build()
    with pytest.raises(fd.TooManySkipped, match=r"\d+ samples skipped, more than max_skipped=3:\n  sample 3 \(3\) at node 'checked'"):
        dr.execute(["total"], inputs={"n": 100}, on_error="skip", max_skipped=3)
    with pytest.raises(fd.TooManySkipped, match=r"more than max_skipped=5.0% of"):
        dr.execute(["total"], inputs={"n": 100}, on_error="skip", max_skipped=0.05)
    assert dr.execute(["total"], inputs={"n": 100}, on_error="skip", max_skipped=0.2)["total"] > 0
    with pytest.raises(fd.InputError, match=r"on_error='ignore': expected 'raise' or 'skip'"):
        dr.execute(["total"], inputs={"n": 1}, on_error="ignore")


def test_pool_workers_die_with_their_parent(tmp_path: Path) -> None:
    """A killed main process leaves no pool workers behind (they would hold memory and pipes)."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, signal, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import flowdata as fd\n"
        "from tests.test_execute import _worker_pid\n"
        "ex = fd.ProcessExecutor(num_workers=2)\n"
        "print(' '.join(map(str, set(ex.map(_worker_pid, range(8), context=None)))), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, str(script), root], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert pids and os.getpid() not in pids
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]


def _worker_pid(_context: object, _: int) -> int:
    time.sleep(0.05)
    return os.getpid()


def _alive(pid: int) -> bool:
    psutil = pytest.importorskip("psutil")
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def test_forked_workers_run_torch_after_the_parent_used_its_threads(tmp_path: Path) -> None:
    """torch's thread pool does not survive fork; workers must not wait on it forever.

    Runs in a child process with a deadline, so a regression fails instead of hanging.
    """
    pytest.importorskip("torch")
    (tmp_path / "torch_flow.py").write_text(
        "import torch\n"
        "from flowdata import Parallel, Collect\n"
        "def seed(n: int) -> Parallel[int]:\n"
        "    yield from range(n)\n"
        "def norm(seed: int) -> float:\n"
        "    g = torch.Generator().manual_seed(seed)\n"
        "    return float((torch.randn(256, 256, generator=g) @ torch.randn(256, 256, generator=g)).abs().sum())\n"
        "def total(norm: Collect[float]) -> int:\n"
        "    return len(list(norm))\n"
    )
    script = tmp_path / "main.py"
    script.write_text(
        "import sys, torch\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import flowdata as fd, torch_flow\n"
        "torch.set_num_threads(2)\n"
        "torch.randn(512, 512) @ torch.randn(512, 512)  # wakes the parent's intra-op threads\n"
        "dr = fd.Builder().with_modules(torch_flow).build()\n"
        "with fd.ProcessExecutor(num_workers=2, start_method='fork') as ex:\n"
        "    print(dr.execute(['total'], inputs={'n': 40}, executor=ex)['total'])\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        pytest.fail("forked workers hung running torch after the parent had used its thread pool")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["40"]


def _torch_threads(_context: object, _: int) -> int:
    import torch

    return int(torch.get_num_threads())


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_workers_compute_with_one_torch_thread(method: str) -> None:
    """N workers with N threads each would oversubscribe the CPUs; spawned workers import torch late."""
    pytest.importorskip("torch")
    with fd.ProcessExecutor(num_workers=2, start_method=method) as ex:
        assert set(ex.map(_torch_threads, range(4), context=None)) == {1}
