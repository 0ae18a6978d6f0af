"""The launcher of the torch.distributed rows (``dist_main``): a rank that hangs says where.

A rank still running at the timeout has every thread's stack appended to its log, its own
and its child processes' (forked DataLoader workers, which inherit its handler, and a
spawned Python, which dumps on ``SIGABRT`` under ``PYTHONFAULTHANDLER``), each after a line
naming the process, native stacks (gdb) first; then all of them are killed.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conformance import dist_main

pytestmark = pytest.mark.procs


def _worker_waits() -> None:
    time.sleep(60)


def _rank_waits(log: Path) -> None:
    with open(log, "ab", buffering=0) as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    dist_main._stacks_on_demand(60)
    multiprocessing.get_context("fork").Process(target=_worker_waits, daemon=True).start()
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    time.sleep(60)


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _until(condition: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)


def test_a_rank_past_the_timeout_leaves_its_stacks_and_its_childrens_in_its_log_and_is_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # gdb reads a process that imported torch in seconds: the native stacks are tested below
    monkeypatch.setattr(dist_main, "_native_stacks", lambda pid: f"(native stacks of {pid})\n".encode())
    rank = multiprocessing.get_context("fork").Process(target=_rank_waits, args=(tmp_path / "rank0.log",))
    rank.start()
    # Both children started, and the forked one has the rank's handler (the other is Python by then).
    _until(lambda: len(dist_main._children(rank.pid)) == 2 and all(
        dist_main._catches(c, dist_main.signal.SIGUSR1) or b"python" in Path(f"/proc/{c}/cmdline").read_bytes()
        for c in dist_main._children(rank.pid)))
    children = dist_main._children(rank.pid)
    assert len(children) == 2
    time.sleep(0.3)  # the spawned Python has reached its sleep (its faulthandler is on)

    dist_main.stop([rank], tmp_path, timeout=0.1)

    log = (tmp_path / "rank0.log").read_text()
    assert f"launcher: rank 0 (pid {rank.pid}) still runs after 0.1 s, with child processes {children}" in log
    assert f"pid {rank.pid} (rank 0), native stacks: ---\n(native stacks of {rank.pid})\n" in log
    assert f"pid {rank.pid} (rank 0), Python stacks on SIGUSR1" in log
    assert "in _rank_waits" in log and "in _worker_waits" in log  # the rank's stack, and its forked worker's
    assert "on SIGABRT" in log and "Fatal Python error: Aborted" in log  # the spawned Python's
    assert not rank.is_alive()
    _until(lambda: all(_gone(c) for c in children))
    assert all(_gone(c) for c in children)


@pytest.mark.skipif(shutil.which("gdb") is None, reason="no gdb on this machine")
def test_the_native_stacks_of_a_process_name_where_each_thread_waits() -> None:
    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)  # in its sleep
        stacks = dist_main._native_stacks(waiting.pid).decode()
    finally:
        waiting.kill()
        waiting.wait()
    if "ptrace" in stacks and "not permitted" in stacks:
        pytest.skip("this machine does not let gdb attach")
    assert "clock_nanosleep" in stacks or "select" in stacks, stacks  # the native frame it waits in
    assert "[New LWP" not in stacks
    if Path(os.path.realpath(sys.executable) + "-gdb.py").exists():  # then its Python stack too (py-bt)
        assert 'File "<string>", line 1, in <module>' in stacks, stacks
