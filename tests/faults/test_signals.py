"""Fault injection: SIGTERM and Ctrl-C to a process whose thread is in native code.

flowdata must never make a process harder to stop than it is without flowdata. A
Python-level signal handler only runs between two bytecodes, so a handler of flowdata's
left installed would delay a stop for as long as a C call lasts (for good, for a long
one). Each run is a program of its own that is signalled while it is in a long C call
(``sum(range(10**13))`` holds the GIL for hours), after it used flowdata.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.procs  # every test here starts processes (workers, pools or programs)

MODULE = """
import os

import numpy as np

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def busy(item: int, native: int = -1) -> int:
    if item == native:
        with open(os.environ["FD_TEST_MARK"], "w") as f:
            f.write(str(os.getpid()))  # tells the test which process is in the C call
        sum(range(10**13))  # native code holding the GIL for hours
    return item

def busies(busy: Collect[int]) -> list[int]:
    return list(busy)

def value(item: int) -> np.ndarray:
    return np.full(3, float(item))

@reduce(Welford)
def value_stats(value: Collect[np.ndarray]) -> Stats:
    raise NotImplementedError("computed by its reducer")

def late(value: np.ndarray, value_stats: Stats) -> np.ndarray:
    return value - value_stats.mean.numpy()
"""

PROGRAM = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own Ctrl-C, even where the parent ignores SIGINT (a background job)
sys.path.insert(0, {folder!r})
{setup}
import flowdata as fd
import signal_module
dr = fd.Builder().with_modules(signal_module).build()
{use}
print("ready", flush=True)
try:
    {native}
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""

# What the program did with flowdata before its main thread enters the C call.
USES = {
    "built a loader": "loader = dr.dataloader(['item'], inputs={'n': 4})",
    "built a loader on workers": "loader = dr.dataloader(['late'], inputs={'n': 40}, num_workers=2)",
    "iterated a loader": "list(dr.dataloader(['busy'], inputs={'n': 8}, batch_size=2, num_workers=2))",
    "ran a pass on a pool": "dr.execute(['busies'], inputs={'n': 8}, executor=fd.ProcessExecutor(2))",
}

FOREVER = "sum(range(10**13))"  # hours in one C call: only a signal's default action ends it


def _start(tmp_path: Path, use: str, *, setup: str = "", native: str = FOREVER,
           ) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "signal_module.py").write_text(MODULE)
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(folder=str(tmp_path), setup=setup, use=use, native=native))
    temp = tmp_path / "temp"
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(temp), "FD_TEST_MARK": str(tmp_path / "mark")}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    return proc, temp


def _ended(proc: subprocess.Popen[str], what: str) -> tuple[str, str]:
    # The limit only tells a process that ignores the signal from a slow machine.
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the program was still running 30 s after {what}")


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def _ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        _kill_group(proc)
        pytest.fail(f"the program failed before its C call: {line!r}\n{proc.stderr.read() if proc.stderr else ''}")
    time.sleep(1.0)  # into the C call (a signal before it would be handled between bytecodes)


@pytest.mark.parametrize("use", sorted(USES))
def test_sigterm_to_a_main_thread_in_a_long_c_call(tmp_path: Path, use: str) -> None:
    """SIGTERM ends the process at once with status -15, as without flowdata (a Python
    SIGTERM handler of flowdata's used to wait for the C call to return: for good)."""
    proc, temp = _start(tmp_path, USES[use])
    try:
        _ready(proc)
        proc.send_signal(signal.SIGTERM)
        _, err = _ended(proc, "SIGTERM")
        assert proc.returncode == -signal.SIGTERM, err[-3000:]
    finally:
        _kill_group(proc)
    # A process ended by a signal runs no clean-up: the next run removes its scratch folders.
    left = sorted(os.listdir(temp))
    assert all(name.startswith(f"flowdata-index-{proc.pid}-") or name.startswith(f"flowdata-context-{proc.pid}-")
                        for name in left), left
    after, _ = _start(tmp_path, USES["built a loader"], native="pass")
    out, err = _ended(after, "its end")
    assert (after.returncode, out.strip()) == (0, "ready"), err[-3000:]
    assert sorted(os.listdir(temp)) == []


@pytest.mark.parametrize("use", sorted(USES))
def test_ctrl_c_to_a_main_thread_in_a_long_c_call_with_the_default_action(tmp_path: Path, use: str) -> None:
    """A program that gave SIGINT its default action (ends the process) keeps it after
    flowdata ran: no handler of flowdata's and no blocked SIGINT is left behind."""
    proc, _ = _start(tmp_path, USES[use], setup="signal.signal(signal.SIGINT, signal.SIG_DFL)")
    try:
        _ready(proc)
        proc.send_signal(signal.SIGINT)
        _, err = _ended(proc, "Ctrl-C")
        assert proc.returncode == -signal.SIGINT, err[-3000:]
    finally:
        _kill_group(proc)


@pytest.mark.parametrize("use", sorted(USES))
def test_ctrl_c_to_a_main_thread_in_c_calls_raises_keyboard_interrupt(tmp_path: Path, use: str) -> None:
    """Python's own Ctrl-C: ``KeyboardInterrupt`` once the running C call returns."""
    loop = "while True:\n        sum(range(10**6))"  # C calls that return: the interrupt comes between two
    proc, _ = _start(tmp_path, USES[use], native=loop)
    try:
        _ready(proc)
        proc.send_signal(signal.SIGINT)
        out, err = _ended(proc, "Ctrl-C")
        assert (proc.returncode, out.strip()) == (0, "interrupted"), err[-3000:]
    finally:
        _kill_group(proc)


WORKER_USES = {
    "DataLoader worker": "list(dr.dataloader(['busy'], inputs={'n': 8, 'native': 3}, batch_size=1, num_workers=2))",
    "pool worker": "dr.execute(['busies'], inputs={'n': 8, 'native': 3}, executor=fd.ProcessExecutor(2))",
}


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # ended, not yet reaped
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("worker", sorted(WORKER_USES))
def test_sigterm_to_a_worker_in_a_long_c_call(tmp_path: Path, worker: str) -> None:
    """A worker whose node is in native code ends on SIGTERM (default action), and the run
    reports the dead worker rather than waiting for it."""
    use = (f"try:\n    {WORKER_USES[worker]}\n"
           "except Exception as exc:\n    print(type(exc).__name__, str(exc).splitlines()[0], flush=True)")
    proc, _ = _start(tmp_path, use, native="pass")
    mark = tmp_path / "mark"
    try:
        for _ in range(600):  # the worker writes its pid just before its C call
            if mark.exists() and mark.read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail("no worker reached the node's C call")
        pid = int(mark.read_text())
        time.sleep(1.0)  # into the C call
        os.kill(pid, signal.SIGTERM)
        for _ in range(300):
            if _gone(pid):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the {worker} was still running 30 s after SIGTERM")
        out, err = _ended(proc, "its worker's end")
        assert proc.returncode == 0, err[-3000:]
        reported = {"DataLoader worker": "WorkerDied a DataLoader worker died",
                    "pool worker": "WorkerDied a worker process of"}[worker]
        assert out.startswith(reported) and out.split()[-1] == "ready", out
    finally:
        _kill_group(proc)
