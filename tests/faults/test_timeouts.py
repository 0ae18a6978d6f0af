"""Fault injection: nodes that never return (timeout=, inline, on a pool, Sequential, in the
loader, one that ignores the timeout or catches every exception), Ctrl-C while a node is
stuck, and a run ended by a signal. Each test is named after the fault it injects; nothing
hangs, nothing is left behind, and every failure says what happened."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flowdata as fd

STUCK = """
import os
import signal
import time

from flowdata import Collect, Parallel, Sequential

def item(n: int) -> Parallel[int]:
    yield from range(n)

def stream(n: int) -> Sequential[int]:
    yield from range(n)

def slow(item: int, stuck: int = 3, deaf: int = -1) -> int:
    if item == stuck:
        if os.environ.get("FD_TEST_STUCK_MARK"):  # tells the test the sample is under way
            open(os.environ["FD_TEST_STUCK_MARK"], "w").close()
        time.sleep(3600)  # a read that never returns, a lock never released
    if item == deaf:  # a node no signal reaches (as native code holding the GIL)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        time.sleep(3600)
    return 2 * item

def swallows(item: int) -> int:
    try:
        if item == 1:
            time.sleep(3600)
    except Exception:
        return -1  # a value as if the sample had been computed
    return item

def streamed(stream: int) -> int:
    if stream == 2:
        time.sleep(3600)
    return stream

def slows(slow: Collect[int]) -> list[int]:
    return list(slow)

def swallowed(swallows: Collect[int]) -> list[int]:
    return list(swallows)

def streams(streamed: Collect[int]) -> list[int]:
    return list(streamed)

def scaled(item: int, slows: list[int]) -> int:
    return item + len(slows)
"""


@pytest.mark.procs
@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_a_node_that_never_returns(build: Callable[..., fd.Driver], executor: str) -> None:
    dr = build(STUCK)
    with pytest.raises(fd.SampleError, match=r"node 'slow' \(.*:14\) failed on sample 3 of group 'item'.*SampleTimeout: timed out after 0.5 s"):
        dr.execute(["slows"], inputs={"n": 6}, timeout=0.5, executor=executor)
    report = fd.Report()
    out = dr.execute(["slows"], inputs={"n": 6}, timeout=0.5, executor=executor, on_error="skip", report=report)
    assert out["slows"] == [0, 2, 4, 8, 10]
    assert [(s.index, s.node, s.error) for s in report.skipped] == [(3, "slow", "SampleTimeout: timed out after 0.5 s")]


@pytest.mark.procs
def test_a_node_that_does_not_respond_to_the_timeout(build: Callable[..., fd.Driver]) -> None:
    dr = build(STUCK)
    report = fd.Report()
    with fd.ProcessExecutor(2) as pool:
        out = dr.execute(["slows"], inputs={"n": 40, "deaf": 7}, timeout=0.5, chunk_size=4, executor=pool,
                         on_error="skip", report=report)
        assert out["slows"] == [2 * i for i in range(40) if i not in (3, 7)]  # every other chunk computed again
        assert {(s.index, s.error.split(",")[0]) for s in report.skipped} == {
            (3, "SampleTimeout: timed out after 0.5 s"), (7, "SampleTimeout: timed out after 0.5 s")}
        deaf = next(s for s in report.skipped if s.index == 7)
        assert "did not respond to the interruption: its worker process (pid" in deaf.error
        assert "was ended after" in deaf.error and "and replaced" in deaf.error
        # The replaced pool goes on serving later calls.
        assert dr.execute(["slows"], inputs={"n": 5, "stuck": -1}, executor=pool)["slows"] == [0, 2, 4, 6, 8]
        with pytest.raises(fd.SampleError, match=r"failed on sample 2 of group 'item'.*timed out after 0.5 s, and did not respond"):
            dr.execute(["slows"], inputs={"n": 8, "stuck": -1, "deaf": 2}, timeout=0.5, executor=pool)


def test_a_node_that_catches_every_exception_is_still_timed_out(build: Callable[..., fd.Driver]) -> None:
    report = fd.Report()
    out = build(STUCK).execute(["swallowed"], inputs={"n": 3}, timeout=0.3, on_error="skip", report=report)
    assert out["swallowed"] == [0, 2] and [s.index for s in report.skipped] == [1]


def test_a_sequential_node_that_never_returns(build: Callable[..., fd.Driver]) -> None:
    dr = build(STUCK)
    with pytest.raises(fd.SampleError, match=r"node 'streamed' .* failed on sample 2 of group 'stream'.*timed out after 0.3 s"):
        dr.execute(["streams"], inputs={"n": 4}, timeout=0.3)
    assert dr.execute(["streams"], inputs={"n": 4}, timeout=0.3, on_error="skip")["streams"] == [0, 1, 3]


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_node_that_never_returns(build: Callable[..., fd.Driver], workers: int) -> None:
    dr = build(STUCK)
    loader = dr.dataloader(["slow"], inputs={"n": 8}, batch_size=2, num_workers=workers, timeout=0.5,
                           on_error="skip")
    assert [v for b in loader for v in b["slow"].tolist()] == [0, 2, 4, 8, 10, 12, 14]
    assert [(s.index, s.error) for s in loader.report.skipped] == [(3, "SampleTimeout: timed out after 0.5 s")]
    loader = dr.dataloader(["slow"], inputs={"n": 8}, batch_size=2, num_workers=workers, timeout=0.5)
    with pytest.raises(fd.SampleError, match=r"node 'slow' .* failed on sample 3 .*timed out after 0.5 s"):
        list(loader)


@pytest.mark.procs
def test_a_loader_node_that_does_not_respond_to_the_timeout(build: Callable[..., fd.Driver]) -> None:
    loader = build(STUCK).dataloader(["slow"], inputs={"n": 8, "stuck": -1, "deaf": 5}, batch_size=2, num_workers=2,
                                     timeout=0.5, on_error="skip")
    with pytest.raises(fd.SampleError, match=r"node 'slow' .* failed on sample 5 of group 'item' .*SampleTimeout: timed out after 0.5 s, and did not respond to the interruption: its DataLoader worker \(pid \d+\) was ended after .* s, which ends the epoch\n    item: 5"):
        list(loader)


@pytest.mark.parametrize("timeout", [0, -1.0, "5", True])
def test_a_timeout_that_is_not_a_number_of_seconds(build: Callable[..., fd.Driver], timeout: Any) -> None:
    dr = build(STUCK)
    with pytest.raises(fd.InputError, match=r"timeout=.*: expected a positive number of seconds, or None for no limit"):
        dr.execute(["slows"], inputs={"n": 2}, timeout=timeout)
    with pytest.raises(fd.InputError, match=r"expected a positive number of seconds"):
        dr.dataloader(["slow"], inputs={"n": 2}, timeout=timeout)


INTERRUPTED = """
import signal, subprocess, sys
sys.path.insert(0, {folder!r})
import flowdata as fd
import {module}

dr = fd.Builder().with_modules({module}).build()
print("ready", flush=True)
try:
    {call}
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.procs
@pytest.mark.parametrize("call", [
    "dr.execute(['slows'], inputs={'n': 8}, executor='processes')",
    "dr.execute(['slows'], inputs={'n': 8})",
    "dr.dataloader(['scaled'], inputs={'n': 8}, num_workers=2)",  # its statistics pass
    "list(dr.dataloader(['slow'], inputs={'n': 8}, num_workers=2))",
])
def test_ctrl_c_while_a_node_is_stuck(make_module: Callable[..., Any], tmp_path: Path, call: str) -> None:
    import signal
    import subprocess
    import sys
    import time

    module = make_module(STUCK)
    script = tmp_path / "run.py"
    script.write_text(INTERRUPTED.format(folder=str(tmp_path), module=module.__name__, call=call))
    mark = tmp_path / "stuck"
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            env={**os.environ, "FD_TEST_STUCK_MARK": str(mark)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        # Interrupt once a worker is stuck in sample 3 (however loaded the machine is,
        # starting the workers may take long), not after a fixed time.
        for _ in range(1200):
            if mark.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert mark.exists(), "sample 3 never started"
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGINT)
        # The pool used to wait for the stuck worker forever; stopping takes about 1.5 s
        # on a quiet machine, and the limit only tells a hang from a slow machine.
        out, err = proc.communicate(timeout=90)
        # Stopped and handled (a process that ends by SIGINT at its very end, after the
        # handler ran, is also what Ctrl-C means; it happens under load).
        assert out.strip() == "interrupted" and proc.returncode in (0, -signal.SIGINT), err[-3000:]
        # No worker left running: a worker still starting when the pool was ended sees
        # its parent gone and ends within a second.
        left = ["?"]
        for _ in range(50):
            left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
            if not left:
                break
            time.sleep(0.1)
        assert left == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


TERMINATED = """
import sys, time
sys.path.insert(0, {folder!r})
import flowdata as fd
import {module}

dr = fd.Builder().with_modules({module}).build()
loader = dr.dataloader(['slow'], inputs={{'n': 1000, 'stuck': -1}})  # an index in a scratch folder
pool = fd.ProcessExecutor(1)
dr.execute(['slows'], inputs={{'n': 4, 'stuck': -1}}, executor=pool)  # the pool's context folder
print("ready", flush=True)
time.sleep(3600)
"""


@pytest.mark.procs
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_run_ended_by_a_signal_leaves_no_scratch_folder(make_module: Callable[..., Any], tmp_path: Path,
                                                          how: str) -> None:
    import signal
    import subprocess
    import sys

    module = make_module(STUCK)
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "run.py"
    script.write_text(TERMINATED.format(folder=str(tmp_path), module=module.__name__))
    env = {**os.environ, "TMPDIR": str(temp)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        kinds = sorted(p.name.split("-")[1] for p in temp.iterdir())
        assert kinds == ["context", "index"]
        proc.send_signal(getattr(signal, how))
        assert proc.wait(timeout=15) == -getattr(signal, how)  # ended by the signal, as without flowdata
    finally:
        proc.kill()
    # No clean-up runs on a signal (a Python SIGTERM handler would delay the end while the
    # main thread is in native code): the next run removes what it left.
    assert len(list(temp.iterdir())) == 2
    subprocess.run([sys.executable, "-c", "import flowdata.run.scratch as s; s.remove(s.make('watch'))"],
                   env=env, check=True)
    assert list(temp.iterdir()) == []


