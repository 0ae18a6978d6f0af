"""The process pool (``executor="processes"``, :class:`flowdata.ProcessExecutor`): what
cannot be sent to a worker is an error, not a hang; fork and spawn start methods; workers
compute with one torch thread, run torch after a fork, and die with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import flowdata as fd
from flowdata.run.executors.worker import run_task


UNPICKLABLE = """
import threading
from flowdata import Collect, Parallel

class Held:
    def __init__(self, i):
        self.i, self.lock = i, threading.Lock()

def item(n: int) -> Parallel[Held]:
    yield from (Held(i) for i in range(n))

def value(item: Held) -> int:
    return item.i

def total(value: Collect[int]) -> int:
    return sum(value)
"""


RUN_UNPICKLABLE = """
import sys
sys.path.insert(0, sys.argv[1])
import flowdata as fd
import unpicklable_flow

dr = fd.Builder().with_modules(unpicklable_flow).build()
try:
    dr.execute(["total"], inputs={"n": 20}, executor="processes")
except fd.FlowdataError as exc:
    print(type(exc).__name__, str(exc).splitlines()[0])
"""


@pytest.mark.procs
def test_unpicklable_items_are_an_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "unpicklable_flow.py").write_text(textwrap.dedent(UNPICKLABLE))
    (tmp_path / "run.py").write_text(RUN_UNPICKLABLE)
    done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        "FlowdataError a task cannot be sent to worker processes: TypeError: cannot pickle '_thread.lock' object")


# --- the pool's workers: start methods, torch threads, a killed parent --------------------


@pytest.mark.procs
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


@pytest.mark.procs
def test_pool_workers_die_with_their_parent(tmp_path: Path) -> None:
    """A killed main process leaves no pool workers behind (they would hold memory and pipes)."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, signal, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import flowdata as fd\n"
        "from tests.run.executors.test_processes import _worker_pid\n"
        "ex = fd.ProcessExecutor(num_workers=2)\n"
        "print(' '.join(map(str, set(ex.map(_worker_pid, range(8), context=None)))), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    root = str(Path(__file__).resolve().parents[3])
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


@pytest.mark.procs
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


@pytest.mark.procs
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_workers_compute_with_one_torch_thread(method: str) -> None:
    """N workers with N threads each would oversubscribe the CPUs; spawned workers import torch late."""
    pytest.importorskip("torch")
    with fd.ProcessExecutor(num_workers=2, start_method=method) as ex:
        assert set(ex.map(_torch_threads, range(4), context=None)) == {1}
