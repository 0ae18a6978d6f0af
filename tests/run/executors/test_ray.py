"""RayExecutor against a real local Ray (``ray.init(num_cpus=2)``, started once for this file).

What the conformance suite does not pin: bitwise equality of reductions with the inline
executor, the errors (a failing sample, a dead worker, what cannot be pickled, a missing
Ray), skips, the loader's statistics pass, a Ray that was running before (used as it is,
never shut down by the executor), the driver's script and ``sys.path`` in the workers,
and the CLI, in this process and from another one that joins this cluster by address.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import flowdata as fd
from flowdata.cli import main
from flowdata.report import Report
from flowdata.errors import WorkerDied
from tests.dataflows import two_pass
from tests.run.test_execute import FAILING  # the same failing module as the other executors

pytestmark = pytest.mark.ray  # a local Ray, started once for this file

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def executor() -> Iterator[fd.RayExecutor]:
    ex = fd.RayExecutor()
    yield ex
    ex.close()


STATS = """
import math
import torch
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def features(item: int) -> torch.Tensor:
    # values of very different sizes: the order of additions shows in the last bits
    return torch.tensor([math.sin(item) * 1e4, math.cos(item * 0.7), (item % 97) * 1e-3, float(item)],
                        dtype=torch.float32)

@reduce(Welford, dim=0)
def stats(features: Collect[torch.Tensor]) -> Stats: ...

def normalized(features: torch.Tensor, stats: Stats) -> torch.Tensor:
    return (features - stats.mean) / stats.std

def peak(normalized: Collect[torch.Tensor]) -> float:
    return max(float(v.abs().max()) for v in normalized)
"""


def _bits(stats: Any) -> list[bytes]:
    return [getattr(stats, f).numpy().tobytes() for f in ("mean", "var", "std", "min", "max", "count")]


@pytest.mark.parametrize("chunk_size", [None, 7])
def test_reductions_are_bitwise_equal_to_inline(build: Callable[..., fd.Driver], executor: fd.RayExecutor,
                                                chunk_size: int | None) -> None:
    dr = build(STATS)
    inline = dr.execute(["stats", "peak"], inputs={"n": 3000})
    got = dr.execute(["stats", "peak"], inputs={"n": 3000}, executor=executor, chunk_size=chunk_size)
    assert _bits(got["stats"]) == _bits(inline["stats"])
    assert got["peak"] == inline["peak"]
    assert int(got["stats"].count[0]) == 3000


def test_a_failing_sample_is_the_same_sample_error(make_module: Callable[[str], Any],
                                                  executor: fd.RayExecutor) -> None:
    m = make_module(FAILING)
    dr = fd.Builder().with_modules(m).build()
    pattern = (
        r"node 'decoded' \(.*fdmod_\w+\.py:6\) failed on sample 13 of group 'item' \(pass 1, worker ray pid \d+\): "
        r"ValueError: corrupt header\n    item: 'file-13.wav'\n"
        r"    fix: reproduce it alone with driver.run_sample\(\['decoded'\], index=13, inputs=<the same inputs>\)"
    )
    with pytest.raises(fd.SampleError, match=pattern) as info:
        dr.execute(["total"], inputs={"n": 40}, executor=executor, chunk_size=5)
    err = info.value
    assert (err.node, err.index, err.group, err.pass_) == ("decoded", 13, "item", 1)
    assert err.worker.startswith("ray pid ") and err.worker != f"ray pid {os.getpid()}"
    assert isinstance(err.__cause__, ValueError)
    assert "traceback in worker ray pid" in "".join(getattr(err.__cause__, "__notes__", []))


def test_skips_are_reported(make_module: Callable[[str], Any], executor: fd.RayExecutor) -> None:
    m = make_module(FAILING.replace('item == "file-13.wav"', 'item.endswith("3.wav")'))
    dr = fd.Builder().with_modules(m).build()
    report = Report()
    got = dr.execute(["total"], inputs={"n": 40}, executor=executor, on_error="skip", report=report, chunk_size=4)
    assert got == {"total": sum(len(f"file-{i}.wav") for i in range(40) if i % 10 != 3)}
    assert [(s.index, s.node, s.item) for s in report.skipped] == [
        (i, "decoded", f"'file-{i}.wav'") for i in (3, 13, 23, 33)
    ]
    assert all(s.error == "ValueError: corrupt header" for s in report.skipped)


def test_loader_statistics_pass_on_ray(build: Callable[..., fd.Driver], executor: fd.RayExecutor) -> None:
    dr = build(STATS)
    base = dr.dataloader(["normalized"], inputs={"n": 500}, batch_size=50)
    loader = dr.dataloader(["normalized"], inputs={"n": 500}, batch_size=50, executor=executor)
    assert _bits(loader.stats["stats"]) == _bits(base.stats["stats"])
    got = [b["normalized"].numpy().tobytes() for b in loader]
    assert got == [b["normalized"].numpy().tobytes() for b in base] and len(got) == 10


def test_a_running_ray_is_used_as_it_is(make_module: Callable[[str], Any]) -> None:
    m = make_module(FAILING.replace("13", "-1"))
    dr = fd.Builder().with_modules(m).build()
    before = ray.get_runtime_context().get_node_id()
    ex = fd.RayExecutor(address="ray://nowhere:1", num_cpus=99)  # arguments for a Ray it would start
    assert dr.execute(["total"], inputs={"n": 30}, executor=ex) == {"total": sum(len(f"file-{i}.wav") for i in range(30))}
    ex.close()
    assert ray.is_initialized() and ray.get_runtime_context().get_node_id() == before
    assert ex.num_workers == 2  # the running Ray's CPUs
    # "ray" as a name: made for the call and closed after it, leaving this Ray running too.
    assert dr.execute(["total"], inputs={"n": 30}, executor="ray")["total"] > 0
    assert ray.is_initialized() and ray.get_runtime_context().get_node_id() == before


def test_ray_is_started_with_the_arguments_and_shut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """When no Ray runs, ``ray.init`` gets the executor's arguments; close shuts it down."""
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: bool(calls))
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(("init", kw)))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown", None)))
    ex = fd.RayExecutor("127.0.0.1:6379", 3, runtime_env={"env_vars": {"A": "1"}})
    assert ex.num_workers == 2
    assert calls == [("init", {"address": "127.0.0.1:6379", "num_cpus": 3, "runtime_env": {"env_vars": {"A": "1"}}})]
    ex.close()
    ex.close()
    assert calls[1:] == [("shutdown", None)]


def test_a_ray_that_cannot_start_is_a_flowdata_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**kw: Any) -> None:
        raise ConnectionError("Could not find any running Ray instance")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(fd.FlowdataError, match=r"RayExecutor\(address='auto'\) could not start or reach Ray: "
                       r"ConnectionError: Could not find any running Ray instance\n  fix: give the address"):
        fd.RayExecutor(address="auto").num_workers


def test_missing_ray_has_an_install_hint() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"  # `import ray` raises ImportError, as when it is not installed
        "import flowdata as fd\n"
        "from tests.dataflows import two_pass\n"
        "dr = fd.Builder().with_modules(two_pass).build()\n"
        "try:\n"
        "    dr.execute(['normalized_max'], inputs={'values': [1.0, 2.0]}, executor=fd.RayExecutor())\n"
        "except fd.FlowdataError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "RayExecutor needs Ray, which is not installed (ModuleNotFoundError: import of ray halted; None in sys.modules)",
        "  fix: pip install flowdata[ray] (or pip install ray), or use executor='processes' on one machine",
    ]


def test_a_dead_worker_is_worker_died(build: Callable[..., fd.Driver], executor: fd.RayExecutor) -> None:
    dr = build("""
    import os
    from flowdata import Collect, Parallel
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def value(item: int, crash: bool, driver: int) -> int:
        if crash and item == 5 and os.getpid() != driver:
            os._exit(3)  # a native crash, or the kernel's OOM killer
        return item
    def total(value: Collect[int]) -> int:
        return sum(value)
    """)
    with pytest.raises(WorkerDied, match=r"a Ray worker of RayExecutor\(\) died while running a chunk \(WorkerCrashedError.*\n"
                       r"  fix: check memory use"):
        dr.execute(["total"], inputs={"n": 20, "crash": True, "driver": os.getpid()}, executor=executor,
                   chunk_size=2)
    # Ray replaces the worker: the executor goes on.
    assert dr.execute(["total"], inputs={"n": 20, "crash": False, "driver": os.getpid()},
                       executor=executor) == {"total": 190}


def test_a_stuck_worker_is_ended_and_its_chunk_computed_again(build: Callable[..., fd.Driver],
                                                              executor: fd.RayExecutor) -> None:
    """``timeout=``: a node that does not respond to the interruption (its signals blocked)
    has its Ray worker ended by flowdata's watch; the other samples of its chunk are
    computed again by a new worker."""
    dr = build("""
    import signal, time
    from flowdata import Collect, Parallel
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def value(item: int) -> int:
        if item == 7:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(60)
        return item
    def total(value: Collect[int]) -> int:
        return sum(value)
    """)
    report = Report()
    start = time.monotonic()
    got = dr.execute(["total"], inputs={"n": 30}, executor=executor, timeout=0.5, chunk_size=5, on_error="skip",
                     report=report)
    assert got == {"total": sum(range(30)) - 7}
    assert [(s.index, s.node) for s in report.skipped] == [(7, "value")]
    assert "did not respond to the interruption: its worker process (pid" in report.skipped[0].error
    assert time.monotonic() - start < 50  # the deaf task sleeps 60 s: it was not waited for


def test_what_cannot_be_pickled_is_named(build: Callable[..., fd.Driver], executor: fd.RayExecutor) -> None:
    dr = build("""
    import threading
    from flowdata import Collect, Parallel
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def lock(n: int) -> object:
        return threading.Lock()
    def guarded(item: int, lock: object) -> int:
        return item
    def total(guarded: Collect[int]) -> int:
        return sum(guarded)
    def locks(n: int) -> Parallel[object]:
        return [threading.Lock() for _ in range(n)]
    def held(locks: object) -> bool:
        return True
    def count(held: Collect[bool]) -> int:
        return sum(held)
    def made(item: int) -> object:
        return threading.Lock()
    def kept(made: Collect[object]) -> int:
        return sum(1 for _ in made)
    """)
    with pytest.raises(fd.FlowdataError, match=r"'lock' \(a lock\) is read by group 'item' but cannot be sent to "
                       r"worker processes: TypeError: cannot pickle '_thread.lock' object\n  fix: return a picklable"):
        dr.execute(["total"], inputs={"n": 4}, executor=executor)
    with pytest.raises(fd.FlowdataError, match=r"a task cannot be sent to Ray workers: TypeError: cannot pickle "
                       r"'_thread.lock' object\n  fix: yield picklable items"):
        dr.execute(["count"], inputs={"n": 4}, executor=executor)
    with pytest.raises(fd.FlowdataError, match=r"a result could not be sent back from Ray worker ray pid \d+: "
                       r"TypeError: cannot pickle '_thread.lock' object\n  fix: return picklable values"):
        dr.execute(["kept"], inputs={"n": 4}, executor=executor)


def _square(context: int, task: int) -> int:
    time.sleep(0.02 * (task % 3))  # later tasks often finish first
    return context * task * task


def _pid_threads(_context: object, _task: int) -> tuple[int, int]:
    import torch

    return os.getpid(), int(torch.get_num_threads())


def _touch_later(folder: str, task: int) -> int:
    if task:
        time.sleep(0.5)
        Path(folder, str(task)).touch()
    return task


def test_map_contract(executor: fd.RayExecutor, tmp_path: Path) -> None:
    """In order, lazily (a bounded window pulled ahead), single-threaded workers, and
    closing the iterator cancels what is still pending."""
    assert list(executor.map(_square, range(30), context=2)) == [2 * i * i for i in range(30)]

    pulled = []

    def endless() -> Iterator[int]:
        i = 0
        while True:
            pulled.append(i)
            yield i
            i += 1

    results = executor.map(_square, endless(), context=1)
    assert [next(results) for _ in range(3)] == [0, 1, 4]
    results.close()  # type: ignore[attr-defined]
    assert len(pulled) <= 3 + 2 * executor.num_workers

    assert {threads for _, threads in executor.map(_pid_threads, range(6), context=None)} == {1}

    with fd.RayExecutor(max_in_flight=8) as small:
        results = small.map(_touch_later, range(20), context=str(tmp_path))
        assert next(results) == 0  # 8 more tasks are pending now, each 0.5 s of work on 2 CPUs
        results.close()  # type: ignore[attr-defined]
        # Not waited for: had close() waited for the 8 tasks, all 8 files would be there
        # (checked below, with no clock, so that a loaded machine cannot fail it).
    time.sleep(2.5)  # time enough for all 8 to finish if they had not been cancelled
    # Queued tasks never run; a running one is interrupted (Ray's cancel is best-effort for
    # a task that was starting just then, so one per CPU may still finish).
    assert len(list(tmp_path.iterdir())) <= 2


SCRIPT = """
import sys
import flowdata as fd
from flowdata import Collect, Parallel

class Scale:  # a value of the script's own class crosses both ways
    def __init__(self, k):
        self.k = k

def factor(k: int) -> Scale:
    return Scale(k)

def item(n: int) -> Parallel[int]:
    yield from range(n)

def scaled(item: int, factor: Scale) -> Scale:
    return Scale(item * factor.k)

def total(scaled: Collect[Scale]) -> int:
    return sum(s.k for s in scaled)

if __name__ == "__main__":
    import ray
    dr = fd.Builder().with_modules(sys.modules[__name__]).build()
    ex = fd.RayExecutor(address=sys.argv[1])
    print(dr.execute(["total"], inputs={"n": 50, "k": 3}, executor=ex)["total"], ray.is_initialized())
    ex.close()
    print(ray.is_initialized())
"""


def test_a_script_joins_a_running_cluster_by_address(tmp_path: Path) -> None:
    """Another process joins this cluster (``address=``), with its nodes in ``__main__``;
    its close leaves the cluster running, and the CLI's ``ray:ADDRESS`` joins it too."""
    address = ray.get_runtime_context().gcs_address
    script = tmp_path / "prepare.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script), address], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(3 * sum(range(50))), "True", "False"]
    flow = tmp_path / "cli_flow.py"
    flow.write_text("from flowdata import Collect, Parallel\n"
                    "def item(n: int) -> Parallel[int]:\n    yield from range(n)\n"
                    "def total(item: Collect[int]) -> int:\n    return sum(item)\n")
    done = subprocess.run([sys.executable, "-m", "flowdata", "run", str(flow), "--outputs", "total", "--input", "n=10",
                           "--executor", f"ray:{address}"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["total", "45"]
    assert ray.get(ray.put(1)) == 1  # this process's Ray still runs


def test_workers_find_modules_on_the_drivers_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  executor: fd.RayExecutor) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "fd_ray_helpers_x1.py").write_text("def triple(x):\n    return 3 * x\n")
    (tmp_path / "fd_ray_flow_x1.py").write_text(
        "from fd_ray_helpers_x1 import triple\nfrom flowdata import Collect, Parallel\n"
        "def item(n: int) -> Parallel[int]:\n    yield from range(n)\n"
        "def tripled(item: int) -> int:\n    return triple(item)\n"
        "def total(tripled: Collect[int]) -> int:\n    return sum(tripled)\n"
    )
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.syspath_prepend(str(tmp_path))
    import fd_ray_flow_x1  # type: ignore[import-not-found]

    dr = fd.Builder().with_modules(fd_ray_flow_x1).build()
    assert dr.execute(["total"], inputs={"n": 10}, executor=executor) == {"total": 135}
    monkeypatch.delitem(sys.modules, "fd_ray_flow_x1")
    monkeypatch.delitem(sys.modules, "fd_ray_helpers_x1")


def test_cli_executor_ray(capsys: pytest.CaptureFixture[str]) -> None:
    values = [1.0, 2.0, 4.0, 8.5]
    assert main(["run", "tests.dataflows.two_pass", "--outputs", "mean,normalized_max", "--input",
                 f"values={json.dumps(values)}", "--executor", "ray", "--format", "json"]) == 0
    expected = two_pass._oracle(values)
    assert json.loads(capsys.readouterr().out) == {k: expected[k] for k in ("mean", "normalized_max")}
    assert ray.is_initialized()  # the CLI's executor joined this Ray and left it running
