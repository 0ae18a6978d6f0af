"""Helpers shared by the benchmark scripts (``bench_core.py``, ``bench_loader.py``, ``bench_tabular.py`` and others).

Every script runs each row in a fresh interpreter (the script re-run with ``--row NAME``):
the child prints its measurement as one tagged JSON line (:func:`emit`), the parent
parses it (:func:`run_child`). This module imports only the standard library at import
time, so that importing it adds nothing to a row's memory figures; numpy, PIL, flowdata
and Hamilton are imported inside the functions that need them.

Not a benchmark itself; pytest does not collect it (``norecursedirs`` excludes
``tests/benchmarks``).
"""

from __future__ import annotations

import datetime
import json
import math
import multiprocessing
import os
import platform
import resource
import subprocess
import sys
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar

RESULT_TAG = "BENCH_RESULT "
PNG_SIDE = 64

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


# --- rows -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row(Generic[F]):
    """A benchmark row: its name, a label for the tables and the function measuring it."""

    name: str
    label: str
    fn: F


class Rows(dict[str, Row[F]]):
    """The rows of one script, by name; :meth:`row` registers one."""

    def row(self, name: str, label: str) -> Callable[[F], F]:
        """A decorator registering ``fn`` as row ``name``."""

        def register(fn: F) -> F:
            self[name] = Row(name, label, fn)
            return fn

        return register


# --- measuring, in the child ------------------------------------------------------------------


def maxrss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident set size of ``who`` in MB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    raw = resource.getrusage(who).ru_maxrss
    return raw / 2**20 if sys.platform == "darwin" else raw / 2**10


def best_of(work: Callable[[], T], repeats: int, warm_up: bool = True) -> tuple[float, T]:
    """Best wall time of ``repeats`` calls of ``work`` (after one untimed call) and its result."""
    result = work() if warm_up else None
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - t0)
    return best, result  # type: ignore[return-value]  # assigned by the warm-up or the loop


def cpu_snapshot() -> tuple[float, float, float, float] | None:
    """(busy CPU s of the whole machine, stolen s, CPU s of this process and its reaped
    children, wall s), or None where ``/proc/stat`` is missing."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    own = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        own += usage.ru_utime + usage.ru_stime
    return (user + nice + system + irq + softirq) / tick, steal / tick, own, time.perf_counter()


def other_load(
    before: tuple[float, float, float, float] | None, after: tuple[float, float, float, float] | None
) -> tuple[float, float] | None:
    """(other load, steal) between two :func:`cpu_snapshot` readings, as shares of all CPUs.

    Other load is the machine's busy CPU time minus this process's own (and its reaped
    children's), over the wall time between the readings and all CPUs; steal is the time the
    hypervisor stole, likewise. None when either reading is missing.
    """
    if before is None or after is None:
        return None
    cpus = os.cpu_count() or 1
    wall = max(after[3] - before[3], 1e-9)
    load = max(0.0, (after[0] - before[0]) - (after[2] - before[2])) / (wall * cpus)
    return load, (after[1] - before[1]) / (wall * cpus)


def flowdata_driver(module_name: str) -> tuple[Any, float]:
    """A flowdata driver over one workload module (imported by name: it lives next to the
    scripts), and the build time in ms (imports of flowdata excluded)."""
    import importlib

    import flowdata as fd

    t0 = time.perf_counter()
    dr = fd.Builder().with_modules(importlib.import_module(module_name)).build()
    return dr, (time.perf_counter() - t0) * 1e3


def hamilton_driver(module_name: str) -> tuple[Any, float]:
    """A Hamilton dynamic-execution driver, synchronous for every task, and the build time in ms."""
    import importlib

    from hamilton import driver  # type: ignore[import-untyped,unused-ignore]
    from hamilton.execution.executors import SynchronousLocalTaskExecutor  # type: ignore[import-untyped,unused-ignore]

    t0 = time.perf_counter()
    dr = (
        driver.Builder()
        .with_modules(importlib.import_module(module_name))
        .enable_dynamic_execution(allow_experimental_mode=True)
        .with_local_executor(SynchronousLocalTaskExecutor())
        .with_remote_executor(SynchronousLocalTaskExecutor())
        .build()
    )
    return dr, (time.perf_counter() - t0) * 1e3


def png_image(seed: Sequence[int]) -> Any:
    """A deterministic 64x64 RGB PIL image (gradients, noise, three ellipses) drawn from
    ``default_rng(seed)``."""
    import numpy as np
    from PIL import Image, ImageDraw

    base = np.linspace(0.0, 255.0, PNG_SIDE, dtype=np.float32)
    rng = np.random.default_rng(list(seed))
    planes = [np.add.outer(base * rng.random(), base * rng.random()) / 2 for _ in range(3)]
    arr = np.stack(planes, axis=-1) + rng.normal(0.0, 12.0, (PNG_SIDE, PNG_SIDE, 3))
    im = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(im)
    for _ in range(3):
        x0, y0 = (int(v) for v in rng.integers(0, PNG_SIDE - 16, 2))
        w, h = (int(v) for v in rng.integers(8, 32, 2))
        draw.ellipse((x0, y0, x0 + w, y0 + h), fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    return im


def write_pngs(folder: Path, n: int, seed: Sequence[int]) -> float:
    """Writes ``n`` images of :func:`png_image` into ``folder`` as PNGs, image ``i`` drawn
    from ``default_rng([*seed, i])``; returns their size in MB."""
    total = 0
    for i in range(n):
        target = folder / f"img_{i:05d}.png"
        png_image([*seed, i]).save(target)
        total += target.stat().st_size
    return total / 2**20


def emit(measurement: Any) -> None:
    """Child mode: prints a measurement (a dataclass) as the tagged JSON line :func:`run_child` reads."""
    print(RESULT_TAG + json.dumps(asdict(measurement)), flush=True)


# --- the parent -------------------------------------------------------------------------------


def run_child(
    script: str, label: str, argv: Sequence[str], timeout_s: int, env: Mapping[str, str] | None = None
) -> dict[str, Any] | str:
    """Runs ``script`` with ``argv`` in a fresh interpreter, showing progress on stderr;
    ``env`` (e.g. :func:`checkout_env`) is added to this process's environment.

    Returns the fields of the measurement it emitted, or why there is none (timeout, or the
    last line of its stderr).
    """
    print(f"  running {label} ...", end="", file=sys.stderr, flush=True)
    cmd = [sys.executable, str(Path(script).resolve()), *argv]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired:
        print(" timed out", file=sys.stderr)
        return f"timed out after {timeout_s} s"
    print(f" {time.perf_counter() - t0:6.1f} s", file=sys.stderr, flush=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            fields: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
            return fields
    return (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]


def take_turns(jobs: Sequence[T], rounds: int) -> Iterator[T]:
    """Every job once per round for ``rounds`` rounds, the order rotated by one each round, so
    that a change in the machine's load hits every job alike and no job always follows the
    same one."""
    for r in range(rounds):
        k = r % max(len(jobs), 1)
        yield from [*jobs[k:], *jobs[:k]]


def best_median(values: Sequence[float], higher_is_better: bool = False) -> tuple[float, float]:
    """The best (the smallest, or the largest with ``higher_is_better``) and the median of ``values``."""
    return (max(values) if higher_is_better else min(values)), statistics.median(values)


def load_line(when: str) -> str:
    """The machine's load averages (``os.getloadavg``), labelled ``when``."""
    one, five, fifteen = os.getloadavg()
    return f"load      {one:.2f} {five:.2f} {fifteen:.2f} (1, 5 and 15 min averages) {when}"


def short_commit(checkout: str | os.PathLike[str]) -> str:
    """The short commit of a git checkout, ``+changes`` appended when its tracked files differ
    from it; ``?`` when it is not one."""
    def git(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", os.fspath(checkout), *argv], capture_output=True, text=True, check=False)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode:
        return "?"
    return head.stdout.strip() + ("+changes" if git("diff", "--quiet", "HEAD").returncode else "")


def checkout_env(checkout: str | os.PathLike[str]) -> dict[str, str]:
    """The environment entries that make a child import ``flowdata`` and ``flowdata_modules``
    from ``checkout`` (first on ``PYTHONPATH``, ahead of an installed copy)."""
    rest = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join([str(Path(checkout).resolve()), *([rest] if rest else [])])}


def version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``not installed``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def hamilton_version() -> str:
    """Hamilton's version, under either of its distribution names."""
    found = version("apache-hamilton")
    return version("sf-hamilton") if found == "not installed" else found


def machine_lines(cpus_extra: str = "") -> list[str]:
    """The date, the machine, its CPUs and memory (``cpus_extra`` appended) and Python;
    each script adds its own package lines."""
    cpu_model = platform.processor() or "?"
    mem_gb = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu_model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu_model)
        with open("/proc/meminfo") as f:
            kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal"))
            mem_gb = f"{kb / 2**20:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"date      {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"machine   {platform.platform()}; {cpu_model}",
        f"cpus      os.cpu_count()={os.cpu_count()}, usable={usable}; memory {mem_gb}{cpus_extra}",
        f"python    {platform.python_implementation()} {platform.python_version()} ({sys.executable})",
    ]


def start_method() -> str:
    """multiprocessing's start method, for the machine description."""
    return multiprocessing.get_start_method()
