"""Loader benchmark: flowdata's training iterator against hand-written torch code, side by side.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_loader.py            # full (a few minutes)
    .venv/bin/python tests/benchmarks/bench_loader.py --quick    # fewer repeats, 1 M paths

What is measured
----------------
**Section 1 — framework overhead.** ``N`` = 50,000 trivial samples (each
``torch.full((16,), float(i))``), batch 64, shuffled, at 0 and 2 workers. Contenders:

- *hand-written*: a map-style ``torch.utils.data.Dataset`` whose ``__getitem__`` returns
  ``{"value": tensor}``, in a plain ``torch.utils.data.DataLoader`` (``shuffle=True``,
  default collation) — what one writes without a framework;
- *flowdata*: ``dr.dataloader(["value"], ...)`` over ``loader_flow.py``, whose source is a
  generator, so the items live in a memory-mapped Arrow index (the default path);
- *flowdata, list source*: the same with a source returning a ``list`` (used as the index
  as it is): the difference with the row above is what the Arrow index costs.

Each loader is built and iterated for one epoch (*first epoch incl. start-up*: building,
for flowdata running the source and writing the index, and with workers starting them).
Then, with ``persistent_workers=True`` so that no epoch pays for starting workers, the
contenders run ``--repeats`` more epochs each, interleaved (one epoch of each in turn,
the order rotated every round) so that a change in the machine's load hits all of them
alike; the best epoch is kept. Targets: flowdata / hand-written <= 1.10x at 0 workers and
<= 1.00x at 2 workers.

*Per-batch transfer*: the same at 0 and 2 workers with an "empty-compute" sample (one
shared 16-float tensor, so a batch costs its collation, a stack into a fresh ``[64, 16]``,
and its trip back from the worker), hand-written and flowdata. ``µs/batch at 2 workers
minus at 0`` is what moving a batch through the worker queue costs the main process.

**Section 2 — decode-bound.** 2,000 64x64 RGB PNGs (gradients, noise and three ellipses
each) written once with PIL into a temporary folder; each sample is decoded with PIL to
float32 CHW divided by 255 (``loader_common.decode_png``, the same function in both
contenders). Hand-written ``Dataset`` over the sorted paths vs flowdata
(``loader_png_flow.py``), batch 64, shuffled, 0 and 2 workers, measured as section 1 but
with twice the epochs (they are short, and vary more from one to the next).
Target: flowdata / hand-written samples/s >= 0.95x.

**Section 3 — ``execute()`` against Hamilton.** The same decode per sample, then the
image's mean, then a plain Collect node summing the means, over the same 2,000 PNGs:
a plain loop, flowdata ``Driver.execute(["mean_sum"])`` inline and with
``ProcessExecutor(num_workers=2)`` (pool started by an untimed first call), and Hamilton
1.90 dynamic execution (``Parallelizable``/``Collect``, ``loader_png_hamilton.py``,
``SynchronousLocalTaskExecutor`` for local and remote tasks, as ``bench_core.py``
builds it; run once, it is slow). The results must equal the plain loop's exactly.

**Section 4 — index memory (copy-on-read).** 2,000,000 paths
``/data/clips/00000000.wav`` ... (1,000,000 with ``--quick``) walked in order by one
DataLoader worker (``num_workers=1``, batch 1,024) with a trivial per-sample node
(``len(path)``). Hand-written: a ``Dataset`` holding a ``list[str]`` built in the main
process before the worker forks; flowdata: a source generator, so an Arrow index the
worker memory-maps (``loader_paths_flow.py``). Inside the worker, at samples 0, n/4,
n/2, 3n/4 and n-1, the per-sample code reads its own memory
(``loader_common.memory_probe``): USS (``psutil`` ``memory_full_info().uss``), and its
two parts from ``/proc/self/smaps_rollup``: Private_Dirty (copy-on-write copies: the
list's reference counts written on every read, pytorch/pytorch#13246) and Private_Clean
(file pages only this worker maps, i.e. the memory-mapped index, which the kernel may drop
at will and which a second worker would share). Part of any worker's Private_Dirty growth
is a one-off that does not grow with the items: Python's cyclic garbage collector, on its
first full collection in the worker, writes to every container object inherited from the
parent (tens of MB with torch imported).

**Section 5 — resume cost.** ``N`` = 50,000 trivial samples (flowdata, batch 64,
shuffled, 0 workers): a loader is iterated ``k`` samples into an epoch (``k // 64``
batches), its ``state_dict()`` taken; a fresh loader (built untimed) then runs
``load_state_dict(state)`` and ``next(iter(loader))``: that is timed for k = 0, 1,000,
10,000, 40,000 (``--repeats`` rounds, each position once per round in rotated order;
best and median), and the batch checked against the same batch of an uninterrupted
epoch. For reference, a plain torch DataLoader has no resume: reaching the same batch
means iterating the ``k // 64`` batches before it.

How it is run
-------------
Every row runs in a fresh interpreter (this script re-run with ``--row NAME``), so memory
figures belong to that row alone and one row's workers never overlap another's. Every
flowdata index goes into a temporary folder removed at the end. Each row also notes the
*other load*: the machine's busy CPU time (``/proc/stat``) minus the row's own (its
process and reaped workers) over the row's wall time and all CPUs; on a 2-core machine a
few percent of other load already moves the 2-worker figures. A calibration line (a
pure-Python loop in two processes at once against one, before and after the rows; 2.00x =
two free cores) says how free the machine was.

How to read it
--------------
- ``µs/sample`` is the best epoch's wall time over ``N``; ``x hand`` the flowdata figure
  over the hand-written one (time ratio in section 1, throughput ratio in section 2).
- The script only reports; it asserts nothing about time or memory. pytest does not
  collect it (``norecursedirs`` excludes ``tests/benchmarks``).
"""

from __future__ import annotations

import argparse
import gc
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the workload modules live next to this script
    sys.path.insert(0, str(HERE))

if TYPE_CHECKING:  # mypy names the modules of this folder tests.benchmarks.*
    from tests.benchmarks import bench_common as bc
else:
    import bench_common as bc

ROW_TIMEOUT_S = 600
SEED = 0

N_TRIVIAL = 50_000
BATCH = 64
N_PNG = 2_000
N_PATHS = 2_000_000
N_PATHS_QUICK = 1_000_000
PATH_BATCH = 1_024
RESUME_AT = (0, 1_000, 10_000, 40_000)
WORKER_COUNTS = (0, 2)

TARGET_OVERHEAD = {0: 1.10, 2: 1.00}  # flowdata / hand-written time, at most
TARGET_DECODE = 0.95  # flowdata / hand-written throughput, at least


# --- what a row reports -----------------------------------------------------------------------


@dataclass
class Measurement:
    """What one row, run in its own interpreter, reports back to the parent.

    Attributes:
        row: Row name (a key of ``ROWS``).
        figures: Named numbers (seconds, MB, ...); names are documented by each row.
        checks: Named correctness checks (sample counts, results, resumed batches).
        other_load: Share of the machine's CPU time busy with other work while the row ran.
        steal: Share of the machine's CPU time stolen by the hypervisor meanwhile.
        error: Why the row produced no figures, if it failed.
    """

    row: str
    figures: dict[str, float] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    other_load: float | None = None
    steal: float | None = None
    error: str | None = None


RowFn = Callable[[argparse.Namespace], Measurement]


ROWS: bc.Rows[RowFn] = bc.Rows()
row = ROWS.row  # registers ``fn(args) -> Measurement`` as a row


# --- hand-written baselines: what one writes with torch alone ---------------------------------


def _hand_datasets() -> dict[str, type]:
    """The hand-written ``Dataset`` classes (``loader_baselines.py``; imported on demand, so the
    parent process never imports torch)."""
    import loader_baselines as lb

    return {"trivial": lb.TrivialDataset, "constant": lb.ConstantDataset, "png": lb.PngDataset, "paths": lb.PathListDataset}


def _hand_loader(dataset: Any, workers: int, *, batch_size: int = BATCH, shuffle: bool = True) -> Any:
    """A plain torch DataLoader as one writes it by hand (persistent workers when there are any)."""
    import torch

    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=torch.Generator().manual_seed(SEED),
        num_workers=workers,
        persistent_workers=workers > 0,
    )


def _flow_driver(module_name: str) -> Any:
    """A flowdata driver over one workload module (imported by name: it lives next to this script)."""
    return bc.flowdata_driver(module_name)[0]


# --- timing epochs ----------------------------------------------------------------------------


@dataclass
class Contender:
    """A loader to time: how to build it, and which batch key counts the samples."""

    name: str
    build: Callable[[], Any]
    key: str
    loader: Any = None


def _epoch(loader: Any, key: str) -> tuple[float, int]:
    """Wall time of one full epoch and the number of samples it yielded."""
    n = 0
    t0 = time.perf_counter()
    for batch in loader:
        n += len(batch[key])
    return time.perf_counter() - t0, n


def _race(contenders: Sequence[Contender], repeats: int, n: int, m: Measurement) -> None:
    """Times each contender's start-up + first epoch, then ``repeats`` interleaved epochs.

    Figures: ``NAME.build_s`` (building the loader), ``NAME.first_s`` (building plus the
    first epoch, workers started included), ``NAME.best_s`` and ``NAME.median_s`` (over the
    later epochs). Check ``NAME.count``: every epoch yielded ``n`` samples.
    """
    for c in contenders:
        t0 = time.perf_counter()
        c.loader = c.build()
        built = time.perf_counter() - t0
        seconds, count = _epoch(c.loader, c.key)
        m.figures[f"{c.name}.build_s"] = built
        m.figures[f"{c.name}.first_s"] = built + seconds
        m.checks[f"{c.name}.count"] = count == n
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    for r in range(repeats):
        shift = r % len(contenders)  # rotate, so no contender always runs right after another
        for c in [*contenders[shift:], *contenders[:shift]]:
            seconds, count = _epoch(c.loader, c.key)
            times[c.name].append(seconds)
            m.checks[f"{c.name}.count"] = m.checks[f"{c.name}.count"] and count == n
    for c in contenders:
        m.figures[f"{c.name}.best_s"] = min(times[c.name])
        m.figures[f"{c.name}.median_s"] = statistics.median(times[c.name])
    for c in contenders:  # stop persistent workers now, so the other-load figure counts them
        c.loader = None
    gc.collect()


# --- section 1: framework overhead, per-batch transfer ----------------------------------------


def _overhead(args: argparse.Namespace, name: str, workers: int) -> Measurement:
    hand = _hand_datasets()
    dr = _flow_driver("loader_flow")
    m = Measurement(name)
    with tempfile.TemporaryDirectory(prefix="bench-loader-index-") as cache:

        def flow(output: str, n: int, w: int) -> Any:
            return dr.dataloader(
                [output], inputs={"n": n}, batch_size=BATCH, shuffle=True, seed=SEED,
                num_workers=w, persistent_workers=w > 0, cache_dir=cache,
            )

        # Imports and lazy initialisation of every code path, untimed (tiny, no workers).
        for loader, key in (
            (_hand_loader(hand["trivial"](256), 0), "value"),
            (flow("value", 256, 0), "value"),
            (flow("listed_value", 256, 0), "listed_value"),
        ):
            _epoch(loader, key)
        n = N_TRIVIAL
        contenders = [
            Contender("hand", lambda: _hand_loader(hand["trivial"](n), workers), "value"),
            Contender("flow", lambda: flow("value", n, workers), "value"),
            Contender("flow-list", lambda: flow("listed_value", n, workers), "listed_value"),
            Contender("hand-empty", lambda: _hand_loader(hand["constant"](n), workers), "value"),
            Contender("flow-empty", lambda: flow("constant", n, workers), "constant"),
        ]
        _race(contenders, args.repeats, n, m)
    return m


@row("overhead-w0", "trivial samples, 0 workers")
def _overhead_w0(args: argparse.Namespace) -> Measurement:
    return _overhead(args, "overhead-w0", 0)


@row("overhead-w2", "trivial samples, 2 workers")
def _overhead_w2(args: argparse.Namespace) -> Measurement:
    return _overhead(args, "overhead-w2", 2)


# --- section 2: decode-bound ------------------------------------------------------------------


def write_pngs(folder: Path, n: int) -> float:
    """Writes ``n`` deterministic 64x64 RGB PNGs into ``folder``; returns their size in MB."""
    return bc.write_pngs(folder, n, seed=(SEED, 11))


def _png_paths(folder: str) -> list[str]:
    return sorted(str(p) for p in Path(folder).glob("*.png"))


def _decode(args: argparse.Namespace, name: str, workers: int) -> Measurement:
    hand = _hand_datasets()
    dr = _flow_driver("loader_png_flow")
    m = Measurement(name)
    paths = _png_paths(args.folder)
    with tempfile.TemporaryDirectory(prefix="bench-loader-index-") as cache:

        def flow(w: int) -> Any:
            return dr.dataloader(
                ["pixels"], inputs={"folder": args.folder}, batch_size=BATCH, shuffle=True, seed=SEED,
                num_workers=w, persistent_workers=w > 0, cache_dir=cache,
            )

        _epoch(_hand_loader(hand["png"](paths[:BATCH]), 0), "pixels")  # imports, page cache
        _epoch(flow(0), "pixels")
        contenders = [
            Contender("hand", lambda: _hand_loader(hand["png"](paths), workers), "pixels"),
            Contender("flow", lambda: flow(workers), "pixels"),
        ]
        # Decode epochs are short and vary more from one to the next: twice the epochs.
        _race(contenders, 2 * args.repeats, len(paths), m)
    m.figures["n"] = len(paths)
    return m


@row("decode-w0", "PNG decode, 0 workers")
def _decode_w0(args: argparse.Namespace) -> Measurement:
    return _decode(args, "decode-w0", 0)


@row("decode-w2", "PNG decode, 2 workers")
def _decode_w2(args: argparse.Namespace) -> Measurement:
    return _decode(args, "decode-w2", 2)


# --- section 3: execute() against Hamilton ----------------------------------------------------


def _exec_measurement(name: str, n: int, seconds: float, result: float, **figures: float) -> Measurement:
    return Measurement(name, figures={"n": n, "seconds": seconds, "result": result, **figures})


@row("exec-plain", "plain Python loop")
def _exec_plain(args: argparse.Namespace) -> Measurement:
    from loader_common import decode_png

    paths = _png_paths(args.folder)
    seconds, result = bc.best_of(lambda: sum(float(decode_png(p).mean()) for p in paths), args.repeats)
    return _exec_measurement("exec-plain", len(paths), seconds, result)


@row("exec-flowdata", "flowdata execute() inline")
def _exec_flowdata(args: argparse.Namespace) -> Measurement:
    dr = _flow_driver("loader_png_flow")
    seconds, result = bc.best_of(lambda: dr.execute(["mean_sum"], inputs={"folder": args.folder})["mean_sum"], args.repeats)
    return _exec_measurement("exec-flowdata", len(_png_paths(args.folder)), seconds, result)


@row("exec-flowdata-proc", "flowdata execute() ProcessExecutor(2)")
def _exec_flowdata_proc(args: argparse.Namespace) -> Measurement:
    import flowdata as fd

    dr = _flow_driver("loader_png_flow")
    with fd.ProcessExecutor(num_workers=2) as ex:
        seconds, result = bc.best_of(
            lambda: dr.execute(["mean_sum"], inputs={"folder": args.folder}, executor=ex)["mean_sum"], args.repeats
        )
    return _exec_measurement("exec-flowdata-proc", len(_png_paths(args.folder)), seconds, result)


@row("exec-hamilton", "Hamilton 1.90 dynamic (sync), once")
def _exec_hamilton(args: argparse.Namespace) -> Measurement:
    dr, _ = bc.hamilton_driver("loader_png_hamilton")
    from loader_common import decode_png

    decode_png(_png_paths(args.folder)[0])  # the same warm-up of the decoder the others get
    t0 = time.perf_counter()
    result = dr.execute(["mean_sum"], inputs={"folder": args.folder})["mean_sum"]
    return _exec_measurement("exec-hamilton", len(_png_paths(args.folder)), time.perf_counter() - t0, result)


# --- section 4: index memory (copy-on-read) ---------------------------------------------------


def _walk_memory(loader: Any, n: int, m: Measurement) -> None:
    """Walks every batch; records the worker's memory probes as ``uss@F``, ``dirty@F``, ``clean@F``.

    Samples come in order (no shuffle), so the running count is the sample index.
    """
    from loader_common import PROBE_FRACTIONS, probe_points

    by_index = {min(n - 1, int(f * n)): f for f in PROBE_FRACTIONS}
    seen = 0
    t0 = time.perf_counter()
    for batch in loader:
        uss, dirty, clean = batch["memory"]
        size = len(batch["path_length"])
        for j in (~uss.isnan()).nonzero().flatten().tolist():
            f = by_index[seen + j]
            m.figures[f"uss@{f}"] = float(uss[j])
            m.figures[f"dirty@{f}"] = float(dirty[j])
            m.figures[f"clean@{f}"] = float(clean[j])
        seen += size
    m.figures["walk_s"] = time.perf_counter() - t0
    m.checks["count"] = seen == n
    m.checks["probes"] = all(f"uss@{by_index[i]}" in m.figures for i in probe_points(n))


@row("cor-list", "hand-written Dataset, list[str] of paths")
def _cor_list(args: argparse.Namespace) -> Measurement:
    hand = _hand_datasets()
    m = Measurement("cor-list")
    n = args.n_paths
    t0 = time.perf_counter()
    paths = [f"/data/clips/{i:08d}.wav" for i in range(n)]
    m.figures["build_s"] = time.perf_counter() - t0
    m.figures["main_before_mb"] = bc.maxrss_mb()
    loader = _hand_loader(hand["paths"](paths), 1, batch_size=PATH_BATCH, shuffle=False)
    _walk_memory(loader, n, m)
    m.figures["main_peak_mb"] = bc.maxrss_mb()
    return m


@row("cor-flow", "flowdata, source generator -> Arrow index")
def _cor_flow(args: argparse.Namespace) -> Measurement:
    dr = _flow_driver("loader_paths_flow")
    m = Measurement("cor-flow")
    n = args.n_paths
    with tempfile.TemporaryDirectory(prefix="bench-loader-index-") as cache:
        t0 = time.perf_counter()
        loader = dr.dataloader(
            ["path_length", "memory"], inputs={"n": n}, batch_size=PATH_BATCH, shuffle=False,
            num_workers=1, cache_dir=cache,
        )
        m.figures["build_s"] = time.perf_counter() - t0
        m.figures["main_before_mb"] = bc.maxrss_mb()
        _walk_memory(loader, n, m)
        m.figures["main_peak_mb"] = bc.maxrss_mb()
        m.figures["index_mb"] = sum(p.stat().st_size for p in Path(cache).rglob("*") if p.is_file()) / 2**20
        del loader
        gc.collect()
    return m


# --- section 5: resume cost -------------------------------------------------------------------


@row("resume", "time to the first batch after load_state_dict")
def _resume(args: argparse.Namespace) -> Measurement:
    import torch

    hand = _hand_datasets()
    dr = _flow_driver("loader_flow")
    m = Measurement("resume")
    n = N_TRIVIAL
    with tempfile.TemporaryDirectory(prefix="bench-loader-index-") as cache:

        def flow() -> Any:
            return dr.dataloader(["value"], inputs={"n": n}, batch_size=BATCH, shuffle=True, seed=SEED, cache_dir=cache)

        reference = [b["value"] for b in flow()]  # an uninterrupted epoch
        states: dict[int, dict[str, Any]] = {}
        for k in RESUME_AT:
            first = flow()
            it = iter(first)
            for _ in range(k // BATCH):
                next(it)
            states[k] = first.state_dict()
            del it, first
        flow_times: dict[int, list[float]] = {k: [] for k in RESUME_AT}
        skip_times: dict[int, list[float]] = {k: [] for k in RESUME_AT}
        for r in range(args.repeats):
            # Every position once per round, the order rotated: a change in the machine's load
            # then hits all positions alike.
            shift = r % len(RESUME_AT)
            for k in [*RESUME_AT[shift:], *RESUME_AT[:shift]]:
                served = k // BATCH
                fresh = flow()  # building is not timed: a resumed run builds its loader anyway
                t0 = time.perf_counter()
                fresh.load_state_dict(states[k])
                batch = next(iter(fresh))
                flow_times[k].append(time.perf_counter() - t0)
                ok = torch.equal(batch["value"], reference[served])
                m.checks[f"flow@{k}"] = m.checks.get(f"flow@{k}", True) and ok
                # A plain torch DataLoader cannot resume: it iterates the batches before.
                plain = _hand_loader(hand["trivial"](n), 0)
                t0 = time.perf_counter()
                it = iter(plain)
                for _ in range(served):
                    next(it)
                next(it)
                skip_times[k].append(time.perf_counter() - t0)
        for k in RESUME_AT:
            m.figures[f"flow@{k}"] = min(flow_times[k])
            m.figures[f"flow-median@{k}"] = statistics.median(flow_times[k])
            m.figures[f"skip@{k}"] = min(skip_times[k])
    return m


# --- child mode -------------------------------------------------------------------------------


def run_row(args: argparse.Namespace) -> None:
    """Child mode: measures one row and prints its :class:`Measurement` as a tagged JSON line."""
    before = bc.cpu_snapshot()
    m = ROWS[args.row].fn(args)
    gc.collect()  # reap any workers left, so that their CPU time counts as the row's own
    load = bc.other_load(before, bc.cpu_snapshot())
    if load is not None:
        m.other_load, m.steal = load
    bc.emit(m)


# --- the parent: run every row in a fresh interpreter, print the tables -----------------------


def measure(name: str, args: argparse.Namespace) -> Measurement:
    """Runs one row in a fresh interpreter and parses what it reports."""
    argv = ["--row", name, "--repeats", str(args.repeats), "--folder", str(args.folder), "--n-paths", str(args.n_paths)]
    out = bc.run_child(__file__, f"{name:<20}", argv, ROW_TIMEOUT_S)
    return Measurement(name, error=out) if isinstance(out, str) else Measurement(**out)


def machine_description() -> list[str]:
    """A description of the machine and the software measured."""
    return [
        *bc.machine_lines(),
        (
            f"packages  torch {bc.version('torch')}, flowdata {bc.version('flowdata')}, hamilton {bc.hamilton_version()}, "
            f"pyarrow {bc.version('pyarrow')}, pillow {bc.version('pillow')}, psutil {bc.version('psutil')}"
        ),
        f"          multiprocessing start method: {bc.start_method()}",
    ]


_SPIN = "import time\nt = time.perf_counter()\nx = 0\nfor i in range(4_000_000):\n    x += i\nprint(time.perf_counter() - t)"


def calibrate() -> float | None:
    """How many free cores a pure-Python loop finds: ``2 x t(1 process) / t(2 at once)``.

    2.00 means two free cores; about 1 means another process keeps one core busy, and the
    2-worker figures mean little.
    """

    def spin(k: int) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE, text=True) for _ in range(k)]
        return max(float(p.communicate()[0]) for p in procs)

    try:
        one = min(spin(1) for _ in range(2))
        return 2 * one / spin(2)
    except (OSError, ValueError):
        return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _fx(r: float | None) -> str:
    return "n/a" if r is None else f"{r:,.0f}x" if r >= 100 else f"{r:.2f}x"


def _fnum(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:,.{digits}f}"


def _load(m: Measurement) -> str:
    if m.other_load is None:
        return "?"
    steal = m.steal or 0.0
    return f"{m.other_load:.0%}" + (f"+{steal:.0%}st" if steal >= 0.005 else "")


def _status(m: Measurement, prefix: str = "") -> str:
    if m.error is not None:
        return f"ERROR: {m.error}"
    bad = [k for k, ok in m.checks.items() if k.startswith(prefix) and not ok]
    return "ok" if not bad else "WRONG: " + ", ".join(bad)


def _verdict(ratio: float | None, target: float, at_most: bool) -> str:
    if ratio is None:
        return "n/a"
    met = ratio <= target if at_most else ratio >= target
    return f"target {'<=' if at_most else '>='} {target:.2f}x: {'met' if met else 'MISSED'}"


def _fig(m: Measurement, key: str) -> float | None:
    return m.figures.get(key)


def print_overhead(res: dict[str, Measurement], n: int, repeats: int) -> None:
    """Section 1: µs per sample of the trivial workload, ratios, per-batch transfer."""
    print(
        f"\nSection 1 - framework overhead: {n:,} trivial samples (torch.full((16,), i)), batch {BATCH}, shuffled"
        f"\n  steady: best of {repeats} epochs after the first, persistent workers, contenders interleaved"
    )
    labels = {
        "hand": "hand-written Dataset + DataLoader",
        "flow": "flowdata (generator -> Arrow index)",
        "flow-list": "flowdata (list source, no Arrow)",
    }
    header = (
        f"{'row':<37}{'workers':>8}{'µs/sample':>11}{'median':>9}{'x hand':>8}"
        f"{'first epoch ms':>16}{'of it build':>13}{'other load':>12}  status"
    )
    print(header)
    print("-" * len(header))
    for w in WORKER_COUNTS:
        m = res[f"overhead-w{w}"]
        hand_best = _fig(m, "hand.best_s")
        for key, label in labels.items():
            best, median = _fig(m, f"{key}.best_s"), _fig(m, f"{key}.median_s")
            first, build = _fig(m, f"{key}.first_s"), _fig(m, f"{key}.build_s")
            print(
                f"{label:<37}{w:>8}{_fnum(None if best is None else best / n * 1e6):>11}"
                f"{_fnum(None if median is None else median / n * 1e6):>9}{_fx(_ratio(best, hand_best)):>8}"
                f"{_fnum(None if first is None else first * 1e3, 0):>16}{_fnum(None if build is None else build * 1e3, 1):>13}"
                f"{_load(m):>12}  {_status(m, key + '.')}"
            )
    print("Targets (flowdata generator source / hand-written, best epochs):")
    for w in WORKER_COUNTS:
        m = res[f"overhead-w{w}"]
        r = _ratio(_fig(m, "flow.best_s"), _fig(m, "hand.best_s"))
        median = _ratio(_fig(m, "flow.median_s"), _fig(m, "hand.median_s"))
        first = _ratio(_fig(m, "flow.first_s"), _fig(m, "hand.first_s"))
        print(
            f"  {w} workers: {_fx(r):>6}  {_verdict(r, TARGET_OVERHEAD[w], at_most=True)}"
            f"   (medians: {_fx(median)}; first epoch incl. start-up: {_fx(first)})"
        )

    print(
        f"\nPer-batch transfer: empty-compute samples (one shared 16-float tensor; a batch is a stack into a "
        f"fresh [{BATCH}, 16] and its trip back)"
    )
    header = f"{'row':<37}{'µs/batch @0':>13}{'µs/batch @2':>13}{'2 workers - 0':>15}{'x hand @2':>11}"
    print(header)
    print("-" * len(header))
    batches = -(-n // BATCH)
    per_batch: dict[str, dict[int, float | None]] = {}
    for key, label in (("hand-empty", "hand-written Dataset + DataLoader"), ("flow-empty", "flowdata")):
        per_batch[key] = {}
        for w in WORKER_COUNTS:
            best = _fig(res[f"overhead-w{w}"], f"{key}.best_s")
            per_batch[key][w] = None if best is None else best / batches * 1e6
        b0, b2 = per_batch[key][0], per_batch[key][2]
        print(
            f"{label:<37}{_fnum(b0, 1):>13}{_fnum(b2, 1):>13}"
            f"{_fnum(None if b0 is None or b2 is None else b2 - b0, 1):>15}"
            f"{_fx(_ratio(b2, per_batch['hand-empty'][2])):>11}"
        )


def print_decode(res: dict[str, Measurement], repeats: int, png_mb: float) -> None:
    """Section 2: samples/s of PNG decoding, flowdata against hand-written."""
    n = int(_fig(res["decode-w0"], "n") or N_PNG)
    print(
        f"\nSection 2 - decode-bound: {n:,} PNGs {bc.PNG_SIDE}x{bc.PNG_SIDE} RGB ({png_mb:.1f} MB) -> float32 CHW / 255, "
        f"batch {BATCH}, shuffled  (best of {2 * repeats} epochs after the first)"
    )
    header = f"{'row':<37}{'workers':>8}{'samples/s':>11}{'median':>9}{'x hand':>8}{'first epoch ms':>16}{'other load':>12}  status"
    print(header)
    print("-" * len(header))
    for w in WORKER_COUNTS:
        m = res[f"decode-w{w}"]
        hand_best = _fig(m, "hand.best_s")
        for key, label in (("hand", "hand-written Dataset + DataLoader"), ("flow", "flowdata dr.dataloader")):
            best, median, first = _fig(m, f"{key}.best_s"), _fig(m, f"{key}.median_s"), _fig(m, f"{key}.first_s")
            print(
                f"{label:<37}{w:>8}{_fnum(None if not best else n / best, 0):>11}"
                f"{_fnum(None if not median else n / median, 0):>9}{_fx(_ratio(hand_best, best)):>8}"
                f"{_fnum(None if first is None else first * 1e3, 0):>16}{_load(m):>12}  {_status(m, key + '.')}"
            )
    for w in WORKER_COUNTS:
        m = res[f"decode-w{w}"]
        r = _ratio(_fig(m, "hand.best_s"), _fig(m, "flow.best_s"))
        median = _ratio(_fig(m, "hand.median_s"), _fig(m, "flow.median_s"))
        print(
            f"  {w} workers: flowdata / hand-written throughput {_fx(r):>6}  "
            f"{_verdict(r, TARGET_DECODE, at_most=False)}   (medians: {_fx(median)})"
        )
    s0, s2 = _fig(res["decode-w0"], "flow.best_s"), _fig(res["decode-w2"], "flow.best_s")
    h0, h2 = _fig(res["decode-w0"], "hand.best_s"), _fig(res["decode-w2"], "hand.best_s")
    print(f"  speed-up 2 workers over 0: hand-written {_fx(_ratio(h0, h2))}, flowdata {_fx(_ratio(s0, s2))}")


def print_execute(res: dict[str, Measurement]) -> None:
    """Section 3: the same per-sample decode through execute() and Hamilton."""
    plain = res["exec-plain"]
    n = int(_fig(plain, "n") or N_PNG)
    print(f"\nSection 3 - execute(): decode -> mean -> Collect sum over {n:,} PNGs (fast rows: best of repeats)")
    header = f"{'row':<40}{'n':>7}{'µs/sample':>11}{'x flowdata inline':>19}{'other load':>12}  result"
    print(header)
    print("-" * len(header))
    inline = _fig(res["exec-flowdata"], "seconds")
    expected = _fig(plain, "result")
    for name in ("exec-plain", "exec-flowdata", "exec-flowdata-proc", "exec-hamilton"):
        m = res[name]
        seconds, count = _fig(m, "seconds"), _fig(m, "n")
        if m.error is not None or seconds is None or not count:
            print(f"{ROWS[name].label:<40}{'-':>7}{'-':>11}{'-':>19}{_load(m):>12}  {_status(m)}")
            continue
        result = _fig(m, "result")
        same = "equals the plain loop" if result == expected else f"DIFFERS: {result!r} vs {expected!r}"
        print(
            f"{ROWS[name].label:<40}{int(count):>7,}{_fnum(seconds / count * 1e6, 1):>11}"
            f"{_fx(_ratio(seconds, inline)):>19}{_load(m):>12}  {same}"
        )


def _growth(m: Measurement, part: str) -> float | None:
    """A memory figure at the end of the walk minus at its start."""
    from loader_common import PROBE_FRACTIONS

    a, b = _fig(m, f"{part}@{PROBE_FRACTIONS[0]}"), _fig(m, f"{part}@{PROBE_FRACTIONS[-1]}")
    return None if a is None or b is None else b - a


def print_memory(res: dict[str, Measurement], n: int) -> None:
    """Section 4: the DataLoader worker's private memory as it walks the items."""
    from loader_common import PROBE_FRACTIONS

    print(
        f"\nSection 4 - index memory: {n:,} paths walked in order by 1 DataLoader worker (batch {PATH_BATCH}), "
        "per-sample len(path)\n  worker memory read inside the worker at samples "
        + ", ".join(f"{f:.0%}" for f in PROBE_FRACTIONS) + " of the walk (MB)"
    )
    cols = "".join(f"{'USS@' + format(f, '.0%'):>10}" for f in PROBE_FRACTIONS)
    header = f"{'row':<42}{cols}{'growth':>9}{'/M items':>9}{'dirty +':>9}{'clean +':>9}{'walk s':>8}  notes"
    print(header)
    print("-" * len(header))
    for name in ("cor-list", "cor-flow"):
        m = res[name]
        if m.error is not None:
            print(f"{ROWS[name].label:<42}  {_status(m)}")
            continue
        uss = [_fig(m, f"uss@{f}") for f in PROBE_FRACTIONS]
        first, last = uss[0], uss[-1]
        growth = None if first is None or last is None else last - first


        notes = [_status(m), f"main peak RSS {_fnum(_fig(m, 'main_peak_mb'), 0)} MB", f"build {_fnum(_fig(m, 'build_s'), 1)} s"]
        if "index_mb" in m.figures:
            notes.append(f"index file {_fnum(_fig(m, 'index_mb'), 0)} MB")
        notes.append(f"other load {_load(m)}")
        cells = "".join(f"{_fnum(u, 1):>10}" for u in uss)
        print(
            f"{ROWS[name].label:<42}{cells}{_fnum(growth, 1):>9}"
            f"{_fnum(None if growth is None else growth / (n / 1e6), 1):>9}"
            f"{_fnum(_growth(m, 'dirty'), 1):>9}{_fnum(_growth(m, 'clean'), 1):>9}{_fnum(_fig(m, 'walk_s'), 1):>8}  {'; '.join(notes)}"
        )
    print(
        "  growth = USS at the end minus at sample 0; dirty + / clean + = the same for Private_Dirty "
        "(copy-on-write copies)\n  and Private_Clean (file pages only this worker maps: the memory-mapped index, "
        "page cache the kernel may drop)"
    )


def print_resume(res: dict[str, Measurement], repeats: int) -> None:
    """Section 5: time to the first batch after load_state_dict, by position in the epoch."""
    m = res["resume"]
    print(
        f"\nSection 5 - resume: {N_TRIVIAL:,} trivial samples, batch {BATCH}, shuffled, 0 workers; "
        f"time to the first batch (best of {repeats})"
    )
    header = (
        f"{'k samples into the epoch':<26}{'batches':>9}{'flowdata ms':>13}{'median':>9}"
        f"{'torch skip-by-iterating ms':>28}  resumed batch"
    )
    print(header)
    print("-" * len(header))
    if m.error is not None:
        print(f"  {_status(m)}")
        return
    for k in RESUME_AT:
        flow, median, skip = _fig(m, f"flow@{k}"), _fig(m, f"flow-median@{k}"), _fig(m, f"skip@{k}")
        ok = m.checks.get(f"flow@{k}")
        print(
            f"{k:<26,}{k // BATCH:>9,}{_fnum(None if flow is None else flow * 1e3):>13}"
            f"{_fnum(None if median is None else median * 1e3):>9}"
            f"{_fnum(None if skip is None else skip * 1e3):>28}  "
            f"{'-' if ok is None else 'identical to the uninterrupted epoch' if ok else 'DIFFERS'}"
        )
    flows = [f for f in (_fig(m, f"flow@{k}") for k in RESUME_AT) if f is not None]
    medians = [f for f in (_fig(m, f"flow-median@{k}") for k in RESUME_AT) if f is not None]
    if len(flows) == len(medians) == len(RESUME_AT):
        print(
            f"  flowdata, slowest position over fastest (flat = near 1): best {_fx(max(flows) / min(flows))}, "
            f"median {_fx(max(medians) / min(medians))}; other load {_load(m)}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Parses arguments; runs one row (child mode) or the whole benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"3 repeats, {N_PATHS_QUICK:,} paths in section 4")
    parser.add_argument("--repeats", type=int, default=None, help="timed epochs/runs per row (best kept; 9, 3 with --quick)")
    parser.add_argument("--skip-hamilton", action="store_true", help="leave out the Hamilton row")
    parser.add_argument("--row", choices=sorted(ROWS), help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    parser.add_argument("--n-paths", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 9
    if args.n_paths is None:
        args.n_paths = N_PATHS_QUICK if args.quick else N_PATHS

    if args.row is not None:
        run_row(args)
        return 0

    print("flowdata loader benchmark" + (" (--quick)" if args.quick else ""))
    for line in machine_description():
        print("  " + line)
    sys.stdout.flush()

    t0 = time.perf_counter()
    scaling = [calibrate()]
    res: dict[str, Measurement] = {}
    for w in WORKER_COUNTS:
        res[f"overhead-w{w}"] = measure(f"overhead-w{w}", args)
    folder = Path(tempfile.mkdtemp(prefix="bench-loader-png-"))
    try:
        png_mb = write_pngs(folder, N_PNG)
        args.folder = str(folder)
        for w in WORKER_COUNTS:
            res[f"decode-w{w}"] = measure(f"decode-w{w}", args)
        for name in ("exec-plain", "exec-flowdata", "exec-flowdata-proc", "exec-hamilton"):
            if name == "exec-hamilton" and args.skip_hamilton:
                res[name] = Measurement(name, error="skipped (--skip-hamilton)")
                continue
            res[name] = measure(name, args)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for name in ("cor-list", "cor-flow"):
        res[name] = measure(name, args)
    res["resume"] = measure("resume", args)
    scaling.append(calibrate())

    print(
        "  machine calibration, pure-Python loop in 2 processes vs 1 (before, after): "
        + ", ".join(_fnum(x) + "x" for x in scaling)
        + "  (2.00x = two free cores)"
    )

    print_overhead(res, N_TRIVIAL, args.repeats)
    print_decode(res, args.repeats, png_mb)
    print_execute(res)
    print_memory(res, args.n_paths)
    print_resume(res, args.repeats)
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
