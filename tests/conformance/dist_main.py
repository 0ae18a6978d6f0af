"""The ranks of the matrix's ``torch.distributed`` rows: ``python -m tests.conformance.dist_main OUT ROWS.json``.

Imports torch, flowdata and the matrix once, computes each row's inline reference, then
runs the rows one after the other, each in fresh processes forked from here, one per rank,
in a gloo process group of its own on 127.0.0.1 (rank and world size read from it by the
loader, so the ranks share the statistics pass and even out a stream in shards as it
goes). Each rank runs the row's loader, checks it against the reference as a hand-given
rank is checked (statistics, values, skips, warm caches, resume at every batch boundary,
in the same order on every rank so that their collectives meet) and writes
``OUT/<row id>/rank<R>.json``: its batches and padding, or the error it met.

A row that hangs says where. Each rank's log (``OUT/<row id>/rank<R>.log``, its stdout and
stderr) receives every thread's Python stack: written by the rank itself a little before
the timeout (``faulthandler.dump_traceback_later``), then, before the launcher kills what
still runs, by the rank and each of its child processes (its DataLoader workers, which
inherit the rank's handlers when forked) on ``SIGUSR1`` -- or ``SIGABRT`` for a child
that does not catch it (started by spawn: ``PYTHONFAULTHANDLER=1`` makes it dump). Where
the machine has gdb, each such process's native stacks come first (with CPython's
``py-bt`` where its gdb extension is installed): a thread blocked on a lock in C shows
there, and faulthandler can crash reading a thread that runs meanwhile. Nothing of this
costs anything while no row hangs.
"""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch.distributed as dist

from tests.conformance import matrix
from tests.conformance.kinds import KIND
from tests.conformance.matrix import Row

TIMEOUT = 120.0  # seconds for one row's ranks
DUMP_EARLY = 10.0  # a rank dumps its stacks itself this long before the timeout


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_main(row: Row, rank: int, port: int, out: Path) -> None:
    with open(out / f"rank{rank}.log", "ab", buffering=0) as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    _stacks_on_demand(TIMEOUT - DUMP_EARLY)
    result: dict[str, Any] = {}
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=row.ranks)
        import flowdata as fd

        executor: Any = fd.ProcessExecutor(2) if row.executor == "processes" else row.executor
        kind = KIND[row.kind]
        values, stats, skipped = matrix.reference(row.kind)
        cache_dir = out / "cache" if row.cache else None

        def make() -> Any:
            return matrix.loader(kind, executor, row.workers, None, None, cache_dir, row.shuffle)

        first = matrix.epoch(make())
        matrix._check_loader(first, stats, skipped, values, f"rank {rank}")
        if row.cache:
            warm = matrix.epoch(make())
            matrix._check_loader(warm, stats, skipped, values, f"rank {rank}, warm")
            assert (warm.batches, warm.padding) == (first.batches, first.padding), "a warm loader delivered other bits"
            assert all(warm.loader.report.cache[n]["misses"] == 0 for n in matrix.CACHED), warm.loader.report.cache
        if row.resume:
            for k, state in enumerate(first.states):
                rest = matrix.epoch(make(), state)
                assert (rest.batches, rest.padding) == (first.batches[k:], first.padding[k:]), (
                    f"rank {rank}, resumed after {k} of {len(first.batches)} batches: another remainder")
        result = {"batches": first.batches, "padding": first.padding}
        if executor != row.executor:
            executor.close()
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 -- written for the test to show
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    faulthandler.cancel_dump_traceback_later()
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def _stacks_on_demand(later: float) -> None:
    """Every thread's stack to file descriptor 2 (the rank's log): on a fatal signal, on
    ``SIGUSR1``, and once after ``later`` seconds. Forked children inherit the handlers."""
    faulthandler.enable(2, all_threads=True)
    faulthandler.register(signal.SIGUSR1, 2, all_threads=True)
    faulthandler.dump_traceback_later(later, file=2)


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, depth first (read from /proc)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # it has ended
        return found
    for task in tasks:
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *_children(child)]
    return found


def _catches(pid: int, sig: int) -> bool:
    """Whether ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0)
    return bool(caught >> (sig - 1) & 1)


def _native_stacks(pid: int) -> bytes:
    """Every thread's native stack of ``pid``, then its Python stack, as gdb reads them (if
    the machine has gdb and may attach: else a line saying why not)."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return b"(no gdb on this machine: no native stacks)\n"
    command = [gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt 40"]
    extension = Path(os.path.realpath(sys.executable) + "-gdb.py")  # CPython's py-bt
    if extension.exists():
        command += ["-ex", f"source {extension}", "-ex", "thread apply all py-bt"]
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=90)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(gdb: {exc})\n".encode()
    return b"".join(line for line in done.stdout.splitlines(keepends=True) if not line.startswith(b"[New LWP"))


def stop(procs: list[Any], out: Path, timeout: float) -> None:
    """Waits up to ``timeout`` seconds for the ranks ``procs`` in all; the stacks of every
    rank still running then, and of its children, are appended to its log, each after a
    line naming the process; then they are all killed (none is killed before every one was
    asked: a rank left alone would stop, its state lost, once a peer dies)."""
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [(rank, p, _children(p.pid)) for rank, p in enumerate(procs) if p.is_alive()]
    for rank, p, children in hung:
        with open(out / f"rank{rank}.log", "ab", buffering=0) as log:
            log.write(f"\n--- launcher: rank {rank} (pid {p.pid}) still runs after {timeout:g} s, with child "
                      f"processes {children or 'none'}; the stacks of their threads follow ---\n".encode())
            for pid, who in [(p.pid, f"rank {rank}"), *((c, f"a child of rank {rank}") for c in children)]:
                log.write(f"--- launcher: pid {pid} ({who}), native stacks: ---\n".encode() + _native_stacks(pid))
                sig = signal.SIGUSR1 if _catches(pid, signal.SIGUSR1) else signal.SIGABRT
                log.write(f"--- launcher: pid {pid} ({who}), Python stacks on {sig.name}: ---\n".encode())
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    continue
                time.sleep(0.5)  # the dump is written from the signal handler, at once
    for _, p, children in hung:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.kill()
        p.join()


def main(root: Path, rows: list[Row]) -> None:
    for row in rows:
        matrix.reference(row.kind)  # computed once here, inherited by the forked ranks
        matrix.order(row.kind, row.shuffle)
        out = root / row.id
        out.mkdir(parents=True, exist_ok=True)
        port = _port()
        fork = multiprocessing.get_context("fork")
        procs = [fork.Process(target=rank_main, args=(row, r, port, out)) for r in range(row.ranks)]
        for p in procs:
            p.start()
        stop(procs, out, TIMEOUT)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Row(**r) for r in json.loads(Path(sys.argv[2]).read_text())])
