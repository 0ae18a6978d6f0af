"""Fault injection: Ctrl-C in a program that runs ``execute()`` on a local Ray that
``RayExecutor(num_cpus=2)`` starts. Each run is a program of its own, interrupted at a
chosen moment (while ``ray.init`` starts Ray's processes, during a map, during the
shutdown), that must stop within seconds with a ``KeyboardInterrupt``, never crash inside
Ray, and leave no process of its Ray behind.

Ray takes seconds to start here: the default tier runs one program per moment, the slow
test a dozen at random moments.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray  # programs that start a local Ray

pytest.importorskip("ray")

MODULE = """
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
"""

# FD_TEST_AT says when the program interrupts itself, FD_TEST_DELAY seconds after:
# "start-up" once ray.init has started the raylet (which starts Ray's agents), "map" once
# the first result came back, "close" once ray.shutdown began. FD_TEST_GROUP=1 sends the
# signal to the whole process group, as Ctrl-C in a terminal does (Ray's processes too).
PROGRAM = """
import os, signal, sys, threading, time
sys.path.insert(0, {folder!r})
at, delay = os.environ["FD_TEST_AT"], float(os.environ["FD_TEST_DELAY"])

def interrupt_later():
    def send():
        time.sleep(delay)
        if os.environ.get("FD_TEST_GROUP") == "1":
            os.killpg(os.getpgid(0), signal.SIGINT)
        else:
            os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=send, daemon=True).start()

import ray
import ray._private.node
import flowdata as fd
import ray_module

if at == "start-up":
    start_raylet = ray._private.node.Node.start_raylet
    def start_raylet_then_interrupt(self, *args, **kwargs):
        start_raylet(self, *args, **kwargs)
        interrupt_later()
    ray._private.node.Node.start_raylet = start_raylet_then_interrupt
elif at == "close":
    shutdown = ray.shutdown
    def shutdown_interrupted(*args, **kwargs):
        if not shutdown_interrupted.__dict__.get("once"):
            shutdown_interrupted.once = True
            interrupt_later()
        return shutdown(*args, **kwargs)
    ray.shutdown = shutdown_interrupted
elif at == "map":
    run_map = fd.RayExecutor.map
    def first_result_then_interrupt(self, fn, tasks, *, context):
        results = run_map(self, fn, tasks, context=context)
        first = next(results)
        interrupt_later()
        yield first
        yield from results
    fd.RayExecutor.map = first_result_then_interrupt

dr = fd.Builder().with_modules(ray_module).build()
print("ready", flush=True)
try:
    with fd.RayExecutor(num_cpus=2) as executor:
        dr.execute(["value_stats"], inputs={{"n": 3000}}, executor=executor)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
"""

CRASHES = ("Check failed", "Segmentation fault", "Fatal Python error", "*** SIG", "core dumped", "Aborted")


def _alive(session: int) -> list[str]:
    """The processes of a session still running, by command line (Ray's agents name
    themselves ``ray::DashboardAgent``...)."""
    pids = subprocess.run(["pgrep", "-s", str(session)], capture_output=True, text=True).stdout.split()
    names = []
    for pid in pids:
        try:
            names.append(f"{pid} {Path(f'/proc/{pid}/cmdline').read_text().replace(chr(0), ' ')[:80]}")
        except OSError:  # ended meanwhile
            pass
    return names


def _interrupted(tmp_path: Path, at: str, delay: float, *, group: bool = False) -> None:
    """Runs the program, interrupted ``delay`` seconds after the moment ``at``, and checks
    that it stopped cleanly."""
    (tmp_path / "ray_module.py").write_text(MODULE)
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(folder=str(tmp_path)))
    env = {**os.environ, "FD_TEST_AT": at, "FD_TEST_DELAY": str(delay), "FD_TEST_GROUP": "1" if group else "0"}
    # A session of its own: every process Ray starts for the program is in it (Ray's
    # workers and agents too), so what is left is seen, and killed at the end whatever happens.
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # A run takes 10-20 s on a loaded 2-core machine; the limit only tells a hang apart.
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the program did not stop after Ctrl-C ({at}, delay {delay:.2f} s)")
        where = f"Ctrl-C at {at} + {delay:.2f} s{' to the group' if group else ''}"
        crashes = [c for c in CRASHES if c in err]
        assert not crashes, f"{where}: a crash in Ray ({crashes}):\n{err[-4000:]}"
        # The KeyboardInterrupt reaches the program and ends it as Python does (-SIGINT).
        assert out.split() == ["ready", "interrupted"], f"{where}: {out!r}\n{err[-4000:]}"
        assert "KeyboardInterrupt" in err and proc.returncode == -signal.SIGINT, (
            f"{where}: exit {proc.returncode}\n{err[-4000:]}")
        left = _alive(proc.pid)
        deadline = time.monotonic() + 10  # a worker sees its raylet gone within a second or two
        while left and time.monotonic() < deadline:
            time.sleep(0.25)
            left = _alive(proc.pid)
        assert left == [], f"{where}: Ray processes left running: {left}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


def test_ctrl_c_while_ray_starts_leaves_no_agent_running(tmp_path: Path) -> None:
    """The raylet has just started its agents when the Ctrl-C comes: an interrupted
    ray.init used to forget them (ray::DashboardAgent, ray::RuntimeEnvAgent ran on for a
    minute), or to segfault at exit."""
    _interrupted(tmp_path, "start-up", 0.0)


def test_ctrl_c_during_a_map_cancels_and_shuts_ray_down(tmp_path: Path) -> None:
    """Ctrl-C in a terminal: the driver and Ray's processes get it together."""
    _interrupted(tmp_path, "map", 0.5, group=True)


def test_ctrl_c_during_close_finishes_the_shutdown(tmp_path: Path) -> None:
    _interrupted(tmp_path, "close", 0.2)


@pytest.mark.slow
def test_many_ctrl_cs_at_random_moments_of_a_ray_run(tmp_path: Path) -> None:
    rng = random.Random(32)
    spans = {"start-up": 2.0, "map": 3.0, "close": 0.6}
    for i in range(12):
        at = sorted(spans)[i % 3]
        run = tmp_path / str(i)
        run.mkdir()
        _interrupted(run, at, rng.uniform(0.0, spans[at]), group=rng.random() < 0.5)
