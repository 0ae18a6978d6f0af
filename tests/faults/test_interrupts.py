"""Fault injection: Ctrl-C at any moment of a pool's start. Each run is a program of its own
that is interrupted, and must stop within seconds, leaving no process and no folder behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

LATE = """
import time

import numpy as np

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def value(item: int) -> np.ndarray:
    time.sleep(0.002)
    return np.full(3, float(item))

@reduce(Welford)
def value_stats(value: Collect[np.ndarray]) -> Stats:
    raise NotImplementedError("computed by its reducer")

def late(value: np.ndarray, value_stats: Stats) -> np.ndarray:
    return (value - value_stats.mean.numpy()) / value_stats.std.numpy()
"""

# The program: a thread of its own is alive (as torch's or a library's are), so that the
# kernel may hand a Ctrl-C to a thread other than the main one. FD_TEST_SIGINT_AT=k sends
# the Ctrl-C right after the k-th process the program starts (a pool's worker, a
# DataLoader worker): the moments between two forks of a pool's start.
PROGRAM = """
import os, signal, sys, threading, time
sys.path.insert(0, {folder!r})
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
at = int(os.environ.get("FD_TEST_SIGINT_AT", "0"))
if at:
    import multiprocessing.process as mpp
    started = [0]
    start = mpp.BaseProcess.start
    def start_then_interrupt(self):
        start(self)
        started[0] += 1
        if started[0] == at:
            os.kill(os.getpid(), signal.SIGINT)
    mpp.BaseProcess.start = start_then_interrupt
import flowdata as fd
import late_module
dr = fd.Builder().with_modules(late_module).build()
print("ready", flush=True)
try:
    {call}
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""

CALLS = {
    "statistics pass": "dr.dataloader(['late'], inputs={'n': 1500}, num_workers=2)",
    "epoch": "list(dr.dataloader(['late'], inputs={'n': 300}, num_workers=2, batch_size=8))",
}


def _interrupted(tmp_path: Path, call: str, *, at: int = 0, delay: float = 0.0) -> None:
    """Runs the program, interrupts it (at its ``at``-th process start, or ``delay`` seconds
    after it is ready), and checks that it stopped cleanly."""
    (tmp_path / "late_module.py").write_text(LATE)
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(folder=str(tmp_path), call=call))
    temp = tmp_path / "temp"  # the program's temporary directory: what it leaves there is seen
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(temp), "FD_TEST_SIGINT_AT": str(at)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        if not at:
            import time

            time.sleep(delay)
            os.kill(proc.pid, signal.SIGINT)
        # Stopping takes a second or two; the limit only tells a hang from a slow machine.
        try:
            out, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the program did not stop after Ctrl-C (at={at}, delay={delay:.2f})")
        # Interrupted and handled, or done before the Ctrl-C came (a late delay).
        assert proc.returncode in (0, -signal.SIGINT), err[-3000:]
        assert out.strip() in ("interrupted", ""), out
        left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
        for _ in range(50):  # a worker still starting sees its parent gone within a second
            if not left:
                break
            import time

            time.sleep(0.1)
            left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert left == [], f"processes left running: {left}"
        assert sorted(os.listdir(temp)) == [], "folders left in the temporary directory"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.procs
@pytest.mark.parametrize("at", [1, 2, 3, 4])
@pytest.mark.parametrize("what", sorted(CALLS))
def test_ctrl_c_right_after_a_worker_of_a_pool_starts(tmp_path: Path, what: str, at: int) -> None:
    """The Ctrl-C lands between two forks of a pool's start (or right after the last one,
    before the pool's manager thread): a pool whose workers nobody will tell to stop used
    to be joined at exit forever."""
    _interrupted(tmp_path, CALLS[what], at=at)


@pytest.mark.slow
def test_many_ctrl_cs_at_random_moments_of_building_and_iterating(tmp_path: Path) -> None:
    rng = random.Random(26)
    for i in range(12):
        run = tmp_path / str(i)
        run.mkdir()
        _interrupted(run, CALLS[sorted(CALLS)[i % 2]], delay=rng.uniform(0.0, 1.2))
