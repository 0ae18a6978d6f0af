"""Statistics benchmark: Welford against numpy, and a decode-heavy statistics pass.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_stats.py            # full (about 2 minutes)
    .venv/bin/python tests/benchmarks/bench_stats.py --quick    # 50 MB, 500 PNGs

What is measured
----------------
**Section 1 — Welford throughput, accuracy and memory against numpy.** The data is
``--mb`` MB (200; 50 with ``--quick``; MB = 2**20 bytes) of float32 in batches of
4,096 rows x 64 features (1 MB each), every batch made deterministically from
``(seed, batch index)``; feature ``f`` has mean ``1000 + 10 f`` and standard deviation
``1 + f / 8``, so float32 accumulation error shows. Data generation is never timed. Rows:

- *Welford update*: ``Welford(dim=0).update(batch)`` for every batch, then ``result()``;
- *Welford fold, 64-row blocks*: every row is one sample, folded as flowdata's workers
  fold a reduction (``fold_values`` on a fresh reducer per block of
  ``flowdata.reduce.BLOCK`` consecutive samples, blocks merged in order);
- *numpy float32*: ``data.mean(axis=0)`` and ``data.std(axis=0)`` over the whole data as
  one in-memory ``[N, 64]`` array (the materialising baseline);
- *numpy float64*: the same with ``dtype=np.float64`` (the accuracy-equivalent baseline).

The errors are taken against a float64 reference computed from the same data with
pairwise summation (the data transposed to ``[64, N]`` and reduced along the
contiguous axis; a two-pass variance). numpy's ``axis=0`` reduction of a C-ordered array
adds row after row without pairwise summation, so its float32 error grows with ``N``.

Memory is measured two ways, each row in a fresh interpreter: *Welford streaming*
draws the batches lazily from a generator and updates as they come (never more than one
batch alive); *numpy whole array* builds the ``[N, 64]`` array, then calls ``mean`` and
``std``. ``tracemalloc`` peak (numpy reports its buffers to tracemalloc) gives the memory
the statistics need beyond the data: for Welford, the whole streaming loop including the
current batch; for numpy, only the ``mean`` + ``std`` calls after the array exists. Peak
RSS (``ru_maxrss``) minus the interpreter's RSS after imports gives what the whole
approach costs the process. ``Welford.result()`` imports torch (its ``Stats`` are
tensors), so the Welford rows import torch before reading the base; the import's own
RSS is printed apart. The Welford update row also counts minor page faults per batch.

**Section 2 — statistics pass of a decode-heavy pipeline.** ``--pngs`` 64x64 RGB PNG
files (2,000; 500 with ``--quick``: gradients, noise and three ellipses each) are written
once into a temporary folder. The workload (``stats_flow.py``) is a Parallel source of
the sorted paths, a per-sample ``pixels`` node decoding with PIL into float32 CHW, and a
``@reduce(Welford, dim=(0, 2, 3))`` node (per-channel statistics). Rows:

- *plain loop*: the same ``pixels`` function in a loop, ``np.stack`` and per-channel
  ``mean``/``std`` in float64 (materialises every decoded image);
- *flowdata inline*: ``Driver.execute(["pixel_stats"])``;
- *flowdata inline, plain Collect count*: the same pass feeding ``pixel_count`` (a plain
  Collect node that counts) instead of the reduction: the difference with the row above
  is what folding costs inside the pass. Both rows also count minor page faults;
- *flowdata processes*: the same with ``ProcessExecutor(num_workers=1)`` and ``(2)``; the
  pool is started by an untimed warm-up call and reused.

Every timed row is the best of ``--repeats`` (3) runs after one warm-up run (which also
warms the page cache). After timing, one more run of each process row goes through a
pass-through executor that records the chunk sizes flowdata sent and each chunk's
compute time in the worker (``ChunkResult.seconds``), and the main process's CPU time:
this says whether the workers were busy, idle at the tail, or waiting on the main
process.

The Stats of the inline and process rows are compared with ``torch.equal`` on mean,
std, var, min, max and count: flowdata promises bitwise-identical results for any number
of workers.

Because other processes may share the machine, every row notes the *other load*: the
machine's busy CPU time (``/proc/stat``) minus the row's own (its process and reaped
workers), over the row's wall time and all CPUs, plus the share the hypervisor stole
(``st``). A calibration line also times a pure-Python loop in one process and in two at
once (``2 x t1 / t2``, 2.00 = two free cores) before and after section 2. A speed-up of
the process rows is only meaningful when the other load is near 0% and the calibration
near 2.

How to read it
--------------
- ``MB/s``: data size over the best wall time. ``x numpy f32`` is the Welford row's
  throughput over numpy float32's (target: at least 0.7).
- ``max|err|`` against the float64 reference, absolute and relative to the feature's
  standard deviation (mean) or to itself (std).
- Section 2 ``samples/s`` is the number of PNGs over the best wall time; speed-ups are
  2 workers over 1 worker and over inline (target: at least 1.6 on 2 cores).

The script only reports; it asserts nothing. pytest does not collect it
(``norecursedirs`` excludes ``tests/benchmarks``).
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the workload module lives next to this script
    sys.path.insert(0, str(HERE))

if TYPE_CHECKING:  # mypy names the modules of this folder tests.benchmarks.*
    from tests.benchmarks import bench_common as bc
else:
    import bench_common as bc

ROW_TIMEOUT_S = 900
MB = 2**20
BATCH_ROWS, FEATURES = 4_096, 64
BATCH_BYTES = BATCH_ROWS * FEATURES * 4  # float32: exactly 1 MB
SEED = 20_240_601
STAT_FIELDS = ("mean", "std", "var", "min", "max", "count")

T = TypeVar("T")
R = TypeVar("R")


# --- data ----------------------------------------------------------------------------------


def feature_means() -> np.ndarray:
    """The mean of every feature: large against the spread, so float32 sums lose digits."""
    return (1000.0 + 10.0 * np.arange(FEATURES)).astype(np.float32)


def feature_stds() -> np.ndarray:
    """The standard deviation of every feature."""
    return (1.0 + np.arange(FEATURES) / 8.0).astype(np.float32)


def make_batch(i: int) -> np.ndarray:
    """Batch ``i``: ``[4096, 64]`` float32, the same bits on every call."""
    rng = np.random.default_rng([SEED, i])
    x = rng.standard_normal((BATCH_ROWS, FEATURES), dtype=np.float32)
    x *= feature_stds()
    x += feature_means()
    return x


def lazy_batches(n: int) -> Iterator[np.ndarray]:
    """The batches one at a time; only the current one is alive."""
    for i in range(n):
        yield make_batch(i)


def whole_array(n: int) -> np.ndarray:
    """Every batch in one ``[n * 4096, 64]`` array (filled in place: no second copy)."""
    data = np.empty((n * BATCH_ROWS, FEATURES), dtype=np.float32)
    for i in range(n):
        data[i * BATCH_ROWS : (i + 1) * BATCH_ROWS] = make_batch(i)
    return data


def write_pngs(folder: Path, n: int) -> float:
    """Writes ``n`` deterministic 64x64 RGB PNGs into ``folder``; returns their size in MB."""
    return bc.write_pngs(folder, n, seed=(SEED, 7))


# --- one row, in its own interpreter --------------------------------------------------------


@dataclass
class Measurement:
    """What one row reports back to the parent process.

    Attributes:
        row: Row name (a key of ``ROWS``).
        seconds: Best wall time of the measured work.
        units: Amount of work per run (MB for section 1, samples for section 2).
        rss_base_mb: Peak RSS after imports, before the data exists.
        rss_data_mb: Peak RSS once the data exists (numpy whole array), before the statistics.
        rss_peak_mb: Peak RSS at the end.
        traced_peak_mb: tracemalloc peak of the measured part.
        stats: Statistics computed, as float.hex strings (ints for ``count``), exact.
        notes: Extra figures.
        chunks: Chunk sizes flowdata sent (process rows, instrumented run).
        worker_busy_s: Compute seconds per worker process (instrumented run).
        error: Why the row produced no figures, if it failed.
    """

    row: str
    seconds: float | None = None
    units: float | None = None
    rss_base_mb: float | None = None
    rss_data_mb: float | None = None
    rss_peak_mb: float | None = None
    traced_peak_mb: float | None = None
    stats: dict[str, list[str] | list[int]] = field(default_factory=dict)
    notes: dict[str, float] = field(default_factory=dict)
    chunks: list[int] = field(default_factory=list)
    worker_busy_s: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def rate(self) -> float | None:
        """Units per second."""
        if self.seconds is None or self.units is None or self.seconds <= 0:
            return None
        return self.units / self.seconds


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _import_torch() -> float:
    """Imports torch (``Welford.result()`` does, for the ``Stats`` tensors); returns the MB of
    peak RSS the import added, so that it is not counted as the statistics' memory."""
    before = bc.maxrss_mb()
    import torch  # noqa: F401

    return bc.maxrss_mb() - before


def _hex(values: Any) -> list[str]:
    return [float(v).hex() for v in np.asarray(values, dtype=np.float64).ravel()]


def _encode_stats(stats: Any) -> dict[str, list[str] | list[int]]:
    """A flowdata ``Stats`` as exact JSON-able lists."""
    out: dict[str, list[str] | list[int]] = {}
    for name in STAT_FIELDS:
        value = getattr(stats, name).numpy()
        out[name] = [int(v) for v in value.ravel()] if name == "count" else _hex(value)
    return out


def _encode_mean_std(mean: Any, std: Any) -> dict[str, list[str] | list[int]]:
    return {"mean": _hex(mean), "std": _hex(std)}


RowFn = Callable[[argparse.Namespace], Measurement]
ROWS: bc.Rows[RowFn] = bc.Rows()
row = ROWS.row  # registers ``fn(args) -> Measurement`` as a row


# Section 1: throughput and accuracy (the data lives in memory; generation is untimed).


@row("welford-update", "Welford(dim=0).update per batch")
def _welford_update(args: argparse.Namespace) -> Measurement:
    from flowdata.stats import Welford

    batches = [make_batch(i) for i in range(args.batches)]
    _import_torch()
    base = bc.maxrss_mb()

    def work() -> Any:
        w = Welford(dim=0)
        for b in batches:
            w.update(b)
        return w.result()

    f0 = _minor_faults()
    seconds, stats = bc.best_of(work, args.repeats)
    faults = (_minor_faults() - f0) / ((args.repeats + 1) * args.batches)
    return Measurement(
        "welford-update", seconds, args.batches * BATCH_BYTES / MB, rss_base_mb=base,
        rss_peak_mb=bc.maxrss_mb(), stats=_encode_stats(stats), notes={"faults_per_batch": faults},
    )


@row("welford-fold", "Welford.fold, 64-row blocks + merge")
def _welford_fold(args: argparse.Namespace) -> Measurement:
    from flowdata.reduce import BLOCK, fold_values
    from flowdata.stats import Welford

    # One sample per row (views, no copies), as a per-row tabular pipeline would give.
    rows = [r for i in range(args.batches) for r in make_batch(i)]
    _import_torch()
    base = bc.maxrss_mb()

    def work() -> Any:
        total = Welford(dim=0)
        for start in range(0, len(rows), BLOCK):
            total.merge(fold_values(Welford(dim=0), rows[start : start + BLOCK]))
        return total.result()

    seconds, stats = bc.best_of(work, args.repeats)
    return Measurement(
        "welford-fold", seconds, args.batches * BATCH_BYTES / MB, rss_base_mb=base,
        rss_peak_mb=bc.maxrss_mb(), stats=_encode_stats(stats),
    )


@row("numpy-f32", "numpy mean+std, float32 (whole array)")
def _numpy_f32(args: argparse.Namespace) -> Measurement:
    data = whole_array(args.batches)
    base = bc.maxrss_mb()
    seconds, (mean, std) = bc.best_of(lambda: (data.mean(axis=0), data.std(axis=0)), args.repeats)
    return Measurement(
        "numpy-f32", seconds, data.nbytes / MB, rss_base_mb=base, rss_peak_mb=bc.maxrss_mb(),
        stats=_encode_mean_std(mean, std),
    )


@row("numpy-f64", "numpy mean+std, dtype=float64")
def _numpy_f64(args: argparse.Namespace) -> Measurement:
    data = whole_array(args.batches)
    base = bc.maxrss_mb()
    seconds, (mean, std) = bc.best_of(
        lambda: (data.mean(axis=0, dtype=np.float64), data.std(axis=0, dtype=np.float64)), args.repeats
    )
    return Measurement(
        "numpy-f64", seconds, data.nbytes / MB, rss_base_mb=base, rss_peak_mb=bc.maxrss_mb(),
        stats=_encode_mean_std(mean, std),
    )


@row("reference", "float64 pairwise reference (untimed)")
def _reference(args: argparse.Namespace) -> Measurement:
    # [64, N] float64, C-ordered: numpy sums along the contiguous axis pairwise.
    cols = np.ascontiguousarray(whole_array(args.batches).T, dtype=np.float64)
    mean = cols.mean(axis=1)
    cols -= mean[:, None]
    np.multiply(cols, cols, out=cols)
    std = np.sqrt(cols.mean(axis=1))
    return Measurement("reference", stats=_encode_mean_std(mean, std))


# Section 1: memory (lazy batches streamed into Welford, against the whole array + numpy).


@row("mem-welford", "Welford streaming (lazy batches)")
def _mem_welford(args: argparse.Namespace) -> Measurement:
    from flowdata.stats import Welford

    def stream() -> Any:
        w = Welford(dim=0)
        for b in lazy_batches(args.batches):
            w.update(b)
        return w.result()

    torch_mb = _import_torch()
    base = bc.maxrss_mb()
    t0 = time.perf_counter()
    stream()
    seconds = time.perf_counter() - t0
    peak = bc.maxrss_mb()
    tracemalloc.start()
    stream()
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return Measurement(
        "mem-welford", seconds, args.batches * BATCH_BYTES / MB, rss_base_mb=base, rss_peak_mb=peak,
        traced_peak_mb=traced / MB, notes={"torch_import_mb": torch_mb},
    )


@row("mem-numpy", "numpy whole array, then mean+std")
def _mem_numpy(args: argparse.Namespace) -> Measurement:
    base = bc.maxrss_mb()
    t0 = time.perf_counter()
    data = whole_array(args.batches)
    with_data = bc.maxrss_mb()
    data.mean(axis=0)
    data.std(axis=0)
    seconds = time.perf_counter() - t0
    peak = bc.maxrss_mb()
    tracemalloc.start()  # the array already exists: only what mean + std allocate is traced
    data.mean(axis=0)
    data.std(axis=0)
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return Measurement(
        "mem-numpy", seconds, data.nbytes / MB, rss_base_mb=base, rss_data_mb=with_data,
        rss_peak_mb=peak, traced_peak_mb=traced / MB,
    )


# Section 2: the decode-heavy statistics pass.


def _flow() -> Any:
    """The workload module ``stats_flow`` (imported by name: it lives next to this script)."""
    import importlib

    return importlib.import_module("stats_flow")


def _png_paths(folder: str) -> list[str]:
    return list(_flow().path(folder))


@row("png-plain", "plain loop: decode, np.stack, mean/std")
def _png_plain(args: argparse.Namespace) -> Measurement:
    stats_flow = _flow()
    paths = _png_paths(args.folder)

    def work() -> tuple[np.ndarray, np.ndarray]:
        images = np.stack([stats_flow.pixels(p) for p in paths])  # [N, 3, H, W]
        return images.mean(axis=(0, 2, 3), dtype=np.float64), images.std(axis=(0, 2, 3), dtype=np.float64)

    base = bc.maxrss_mb()
    seconds, (mean, std) = bc.best_of(work, args.repeats)
    return Measurement(
        "png-plain", seconds, len(paths), rss_base_mb=base, rss_peak_mb=bc.maxrss_mb(),
        stats=_encode_mean_std(mean, std),
    )


class ChunkLog:
    """A pass-through executor: delegates to ``inner`` and records chunk sizes and times.

    Follows the ``flowdata.Executor`` contract (``map(fn, tasks, *, context)``, results in
    task order); keyword arguments go through as they are.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sizes: list[int] = []
        self.busy: dict[str, float] = {}

    def map(self, fn: Callable[..., R], tasks: Iterable[T], **kwargs: Any) -> Iterator[R]:
        """Yields ``inner.map(fn, tasks, **kwargs)``, noting each chunk's size and compute time."""
        for result in self.inner.map(fn, tasks, **kwargs):
            self.sizes.append(len(getattr(result, "indices", ())))
            worker = str(getattr(result, "worker", "?"))
            self.busy[worker] = self.busy.get(worker, 0.0) + float(getattr(result, "seconds", 0.0))
            yield result


def _png_flowdata(args: argparse.Namespace, name: str, workers: int) -> Measurement:
    import flowdata as fd

    dr = fd.Builder().with_modules(_flow()).build()
    inputs = {"folder": args.folder}
    n = len(_png_paths(args.folder))
    _import_torch()  # Welford.result() would import it inside the first call
    base = bc.maxrss_mb()
    if workers == 0:
        output = "pixel_count" if name == "png-inline-count" else "pixel_stats"
        f0 = _minor_faults()
        seconds, value = bc.best_of(lambda: dr.execute([output], inputs=inputs)[output], args.repeats)
        faults = (_minor_faults() - f0) / ((args.repeats + 1) * n)
        return Measurement(
            name, seconds, n, rss_base_mb=base, rss_peak_mb=bc.maxrss_mb(),
            stats={} if output == "pixel_count" else _encode_stats(value), notes={"faults_per_sample": faults},
        )
    with fd.ProcessExecutor(num_workers=workers) as ex:
        t0 = time.perf_counter()
        dr.execute(["pixel_stats"], inputs=inputs, executor=ex)  # starts the pool: the warm-up
        first = time.perf_counter() - t0
        seconds, stats = bc.best_of(
            lambda: dr.execute(["pixel_stats"], inputs=inputs, executor=ex)["pixel_stats"], args.repeats,
            warm_up=False,
        )
        log = ChunkLog(ex)
        c0, t0 = time.process_time(), time.perf_counter()
        logged = dr.execute(["pixel_stats"], inputs=inputs, executor=log)["pixel_stats"]
        main_cpu, logged_wall = time.process_time() - c0, time.perf_counter() - t0
    m = Measurement(
        name, seconds, n, rss_base_mb=base, rss_peak_mb=bc.maxrss_mb(), stats=_encode_stats(stats),
        notes={"first_call_s": first, "main_cpu_s": main_cpu, "logged_wall_s": logged_wall},
        chunks=log.sizes, worker_busy_s=log.busy,
    )
    m.notes["logged_identical"] = float(_encode_stats(logged) == m.stats)
    return m


@row("png-inline", "flowdata execute() inline")
def _png_inline(args: argparse.Namespace) -> Measurement:
    return _png_flowdata(args, "png-inline", 0)


@row("png-inline-count", "flowdata inline, plain Collect count")
def _png_inline_count(args: argparse.Namespace) -> Measurement:
    return _png_flowdata(args, "png-inline-count", 0)


@row("png-proc1", "flowdata ProcessExecutor(1)")
def _png_proc1(args: argparse.Namespace) -> Measurement:
    return _png_flowdata(args, "png-proc1", 1)


@row("png-proc2", "flowdata ProcessExecutor(2)")
def _png_proc2(args: argparse.Namespace) -> Measurement:
    return _png_flowdata(args, "png-proc2", 2)


def run_row(args: argparse.Namespace) -> None:
    """Child mode: measures one row and prints its :class:`Measurement` as a tagged JSON line.

    Also notes how busy the machine was with *other* work while the row ran (busy CPU time
    of the whole machine minus this row's own, over the row's wall time and all CPUs), and
    how much time the hypervisor stole: either makes parallel speed-ups look worse.
    """
    before = bc.cpu_snapshot()
    m = ROWS[args.row].fn(args)
    load = bc.other_load(before, bc.cpu_snapshot())
    if load is not None:
        m.notes["other_load"], m.notes["steal"] = load
    bc.emit(m)


# --- the parent: run every row in a fresh interpreter, print the tables ---------------------


def measure(name: str, args: argparse.Namespace) -> Measurement:
    """Runs one row in a fresh interpreter and parses what it reports."""
    argv = ["--row", name, "--repeats", str(args.repeats), "--batches", str(args.batches), "--folder", str(args.folder)]
    out = bc.run_child(__file__, f"{name:<16}", argv, ROW_TIMEOUT_S)
    return Measurement(name, error=out) if isinstance(out, str) else Measurement(**out)


def _spin(n: int) -> float:
    """A pure-Python loop; returns its own wall time."""
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - t0


def cpu_scaling(n: int = 4_000_000) -> tuple[float, float]:
    """(seconds of one ``_spin`` alone, 2 x alone / wall of two at once in two processes)."""
    alone = min(_spin(n) for _ in range(2))
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(_spin, [n // 10, n // 10]))  # start both workers
        t0 = time.perf_counter()
        list(pool.map(_spin, [n, n]))
        both = time.perf_counter() - t0
    return alone, 2 * alone / both


def _threadpools() -> str:
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return "threadpoolctl not installed"
    pools = threadpool_info()
    return "; ".join(f"{p.get('internal_api')} {p.get('version')} x{p.get('num_threads')}" for p in pools) or "none"


def machine_description() -> list[str]:
    """A description of the machine and the software measured."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    env = ", ".join(f"{k}={os.environ[k]}" for k in ("OPENBLAS_CORETYPE", "OMP_NUM_THREADS") if k in os.environ)
    return [
        *bc.machine_lines(f"; load average {load}"),
        f"packages  flowdata {bc.version('flowdata')}, numpy {np.__version__}, torch {bc.version('torch')}, "
        f"Pillow {bc.version('pillow')}; multiprocessing start method: {bc.start_method()}",
        f"threads   {_threadpools()}; env: {env or 'no OPENBLAS_CORETYPE / OMP_NUM_THREADS'}",
    ]


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def _floats(m: Measurement | None, name: str) -> np.ndarray | None:
    if m is None or name not in m.stats:
        return None
    return np.array([float.fromhex(str(v)) for v in m.stats[name]])


def _note(m: Measurement) -> str:
    return f"ERROR: {m.error}" if m.error is not None else ""


def _load(m: Measurement) -> str:
    """Other work on the machine while the row ran, as a share of all CPUs (see run_row)."""
    if "other_load" not in m.notes:
        return "-"
    steal = m.notes.get("steal", 0.0)
    return f"{m.notes['other_load']:.0%}" + (f"+{steal:.0%}st" if steal >= 0.005 else "")


def print_section1(res: dict[str, Measurement], args: argparse.Namespace) -> None:
    """Throughput, accuracy and memory tables of section 1."""
    data_mb = args.batches * BATCH_BYTES / MB
    print(
        f"\nSection 1 - Welford vs numpy: {data_mb:,.0f} MB float32, {args.batches} batches of "
        f"{BATCH_ROWS:,} x {FEATURES}  (time: best of {args.repeats})"
    )
    header = f"{'row':<40}{'MB/s':>9}{'s/pass':>9}{'x numpy f32':>13}{'peak RSS MB':>13}{'other load':>12}  notes"
    print(header)
    print("-" * len(header))
    numpy_rate = res["numpy-f32"].rate
    for name in ("welford-update", "welford-fold", "numpy-f32", "numpy-f64"):
        m = res[name]
        notes = [_note(m)] if m.error else []
        if "faults_per_batch" in m.notes:
            notes.append(f"{m.notes['faults_per_batch']:,.0f} minor page faults per 1 MB batch")
        print(
            f"{ROWS[name].label:<40}{_fmt(m.rate, 0):>9}{_fmt(m.seconds, 3):>9}"
            f"{_ratio(m.rate, numpy_rate):>13}{_fmt(m.rss_peak_mb):>13}{_load(m):>12}  {'; '.join(notes)}"
        )
    ratio = None if res["welford-update"].rate is None or not numpy_rate else res["welford-update"].rate / numpy_rate
    verdict = "n/a" if ratio is None else ("meets" if ratio >= 0.7 else "BELOW") + " the 0.7x target"
    print(f"  Welford update / numpy float32 throughput: {_ratio(res['welford-update'].rate, numpy_rate)}  ({verdict})")

    ref_mean, ref_std = _floats(res["reference"], "mean"), _floats(res["reference"], "std")
    print("\nAccuracy against the float64 pairwise reference (max over the 64 features)")
    header = f"{'row':<40}{'max|mean err|':>15}{'rel. to std':>13}{'max|std err|':>15}{'relative':>11}"
    print(header)
    print("-" * len(header))
    if ref_mean is None or ref_std is None:
        print(f"  no reference: {res['reference'].error}")
    else:
        for name in ("welford-update", "welford-fold", "numpy-f32", "numpy-f64"):
            mean, std = _floats(res[name], "mean"), _floats(res[name], "std")
            if mean is None or std is None:
                continue
            e_mean, e_std = np.abs(mean - ref_mean), np.abs(std - ref_std)
            print(
                f"{ROWS[name].label:<40}{e_mean.max():>15.3e}{(e_mean / ref_std).max():>13.3e}"
                f"{e_std.max():>15.3e}{(e_std / ref_std).max():>11.3e}"
            )
    w_mean, w_std = _floats(res["welford-update"], "mean"), _floats(res["welford-update"], "std")
    n_mean, n_std = _floats(res["numpy-f32"], "mean"), _floats(res["numpy-f32"], "std")
    if w_mean is not None and w_std is not None and n_mean is not None and n_std is not None:
        print(
            f"  Welford update vs numpy float32: max|mean diff| {np.abs(w_mean - n_mean).max():.3e}, "
            f"max|std diff| {np.abs(w_std - n_std).max():.3e}"
        )
    f_mean, f_std = _floats(res["welford-fold"], "mean"), _floats(res["welford-fold"], "std")
    if w_mean is not None and w_std is not None and f_mean is not None and f_std is not None:
        print(
            f"  Welford update vs Welford fold:  max|mean diff| {np.abs(w_mean - f_mean).max():.3e}, "
            f"max|std diff| {np.abs(w_std - f_std).max():.3e}"
        )

    print("\nMemory beyond the data (each row in a fresh interpreter; one run)")
    header = f"{'approach':<40}{'data alive MB':>14}{'tracemalloc peak MB':>21}{'peak RSS - base MB':>20}  notes"
    print(header)
    print("-" * len(header))
    w, n = res["mem-welford"], res["mem-numpy"]
    w_rss = None if w.rss_peak_mb is None or w.rss_base_mb is None else w.rss_peak_mb - w.rss_base_mb
    print(
        f"{ROWS['mem-welford'].label:<40}{BATCH_BYTES / MB:>14.1f}{_fmt(w.traced_peak_mb):>21}{_fmt(w_rss):>20}"
        f"  {_note(w) or 'one batch at a time; the tracemalloc figure includes that batch'}"
    )
    if "torch_import_mb" in w.notes:
        print(
            f"{'':<40}{'':>14}{'':>21}{'':>20}  (not counted: importing torch, which "
            f"Welford.result() does, adds {w.notes['torch_import_mb']:,.0f} MB)"
        )
    n_rss = None if n.rss_peak_mb is None or n.rss_base_mb is None else n.rss_peak_mb - n.rss_base_mb
    n_extra = None if n.rss_peak_mb is None or n.rss_data_mb is None else n.rss_peak_mb - n.rss_data_mb
    print(
        f"{ROWS['mem-numpy'].label:<40}{data_mb:>14.1f}{_fmt(n.traced_peak_mb):>21}{_fmt(n_rss):>20}"
        f"  {_note(n) or f'mean+std alone added {_fmt(n_extra)} MB of RSS to the array'}"
    )


def _stats_equal(a: Measurement, b: Measurement) -> bool:
    import torch

    if not a.stats or not b.stats:
        return False
    for name in STAT_FIELDS:
        if name == "count":
            ta, tb = torch.tensor(a.stats[name], dtype=torch.int64), torch.tensor(b.stats[name], dtype=torch.int64)
        else:
            fa, fb = _floats(a, name), _floats(b, name)
            assert fa is not None and fb is not None
            ta, tb = torch.from_numpy(fa), torch.from_numpy(fb)
        if not torch.equal(ta, tb):
            return False
    return True


def print_section2(res: dict[str, Measurement], args: argparse.Namespace, scaling: Sequence[float]) -> None:
    """Throughput, speed-ups, identity and the instrumented runs of section 2."""
    n_png = res["png-inline"].units or res["png-plain"].units or 0
    print(
        f"\nSection 2 - statistics pass of a decode-heavy pipeline: {n_png:,.0f} PNGs "
        f"{bc.PNG_SIDE}x{bc.PNG_SIDE} RGB ({args.png_mb:.1f} MB on disk), per-channel Welford  "
        f"(time: best of {args.repeats} after a warm-up)"
    )
    print("  machine calibration, pure-Python loop in 2 processes vs 1: " + ", ".join(f"{s:.2f}x" for s in scaling)
          + "  (2.00x = two free cores; before and after this section)")
    header = (
        f"{'row':<42}{'samples/s':>11}{'s/pass':>9}{'µs/sample':>11}{'x inline':>10}{'peak RSS MB':>13}"
        f"{'other load':>12}  notes"
    )
    print(header)
    print("-" * len(header))
    inline = res["png-inline"].rate
    for name in ("png-plain", "png-inline-count", "png-inline", "png-proc1", "png-proc2"):
        m = res[name]
        notes = [_note(m)] if m.error else []
        if "first_call_s" in m.notes:
            notes.append(f"first call incl. pool start {m.notes['first_call_s']:.2f} s")
        us = None if m.rate is None else 1e6 / m.rate
        print(
            f"{ROWS[name].label:<42}{_fmt(m.rate, 0):>11}{_fmt(m.seconds, 3):>9}{_fmt(us, 0):>11}"
            f"{_ratio(m.rate, inline):>10}{_fmt(m.rss_peak_mb):>13}{_load(m):>12}  {'; '.join(notes)}"
        )
    p1, p2 = res["png-proc1"].rate, res["png-proc2"].rate

    def verdict(base: float | None) -> str:
        if p2 is None or not base:
            return f"{_ratio(p2, base)}"
        return f"{_ratio(p2, base)} ({'meets' if p2 / base >= 1.6 else 'BELOW'} the 1.6x target)"

    print(f"  speed-up 2 workers / 1 worker: {verdict(p1)};  2 workers / inline: {verdict(inline)}")

    plain, nofold, inl = res["png-plain"], res["png-inline-count"], res["png-inline"]
    if nofold.rate and inl.rate:
        print(
            f"  folding costs the inline pass {1e6 / inl.rate - 1e6 / nofold.rate:.0f} µs/sample (with the reduction "
            f"{1e6 / inl.rate:.0f}, with a plain Collect count {1e6 / nofold.rate:.0f}); minor page faults per sample: "
            f"{inl.notes.get('faults_per_sample', math.nan):.0f} with, {nofold.notes.get('faults_per_sample', math.nan):.0f} without"
        )

    names = ("png-inline", "png-proc1", "png-proc2")
    ok = [res[n] for n in names if res[n].error is None]
    identical = len(ok) == len(names) and all(_stats_equal(ok[0], m) for m in ok[1:])
    print(
        "  Stats bitwise identical (torch.equal on mean/std/var/min/max/count), inline / 1 / 2 workers: "
        + ("yes" if identical else "NO")
    )
    logged = [res[n].notes.get("logged_identical") for n in ("png-proc1", "png-proc2")]
    if any(x is not None for x in logged):
        print("  instrumented runs identical to their timed runs: " + ("yes" if all(x == 1.0 for x in logged) else "NO"))
    ref_mean, ref_std = _floats(plain, "mean"), _floats(plain, "std")
    fd_mean, fd_std = _floats(res["png-inline"], "mean"), _floats(res["png-inline"], "std")
    if ref_mean is not None and ref_std is not None and fd_mean is not None and fd_std is not None:
        print(
            f"  flowdata vs plain numpy float64: max|mean diff| {np.abs(fd_mean - ref_mean).max():.3e}, "
            f"max|std diff| {np.abs(fd_std - ref_std).max():.3e}"
        )

    print("\n  Instrumented run of each process row (one extra run through a recording executor)")
    for name in ("png-proc1", "png-proc2"):
        m = res[name]
        if m.error is not None or not m.chunks:
            continue
        wall = m.notes.get("logged_wall_s", 0.0)
        busy = sorted(m.worker_busy_s.values(), reverse=True)
        workers = int(name[-1])
        util = sum(busy) / (wall * workers) if wall else 0.0
        print(
            f"  {ROWS[name].label:<30} wall {wall:.3f} s; {len(m.chunks)} chunks, sizes "
            f"{_runs(m.chunks)}"
        )
        print(
            f"  {'':<30} worker compute s: {', '.join(f'{b:.3f}' for b in busy)} "
            f"(utilisation {util:.0%}); main process CPU {m.notes.get('main_cpu_s', 0.0):.3f} s"
        )


def _runs(sizes: Sequence[int]) -> str:
    """``[64, 64, 64, 128]`` as ``64x3 128``."""
    parts: list[str] = []
    i = 0
    while i < len(sizes):
        j = i
        while j < len(sizes) and sizes[j] == sizes[i]:
            j += 1
        parts.append(f"{sizes[i]}x{j - i}" if j - i > 1 else str(sizes[i]))
        i = j
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Parses arguments; runs one row (child mode) or the whole benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="50 MB and 500 PNGs")
    parser.add_argument("--mb", type=int, help="MB of float32 data in section 1 (default 200; 50 with --quick)")
    parser.add_argument("--pngs", type=int, help="PNG files in section 2 (default 2,000; 500 with --quick)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per row (best is kept)")
    parser.add_argument("--skip-section1", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-section2", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--row", choices=sorted(ROWS), help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--batches", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.repeats = max(1, args.repeats)

    if args.row is not None:
        run_row(args)
        return 0

    mb = args.mb or (50 if args.quick else 200)
    args.batches = max(1, round(mb * MB / BATCH_BYTES))
    n_png = args.pngs or (500 if args.quick else 2_000)
    print("flowdata statistics benchmark" + (" (--quick)" if args.quick else ""))
    for line in machine_description():
        print("  " + line)
    sys.stdout.flush()

    t0 = time.perf_counter()
    res: dict[str, Measurement] = {}
    if not args.skip_section1:
        for name in ("welford-update", "welford-fold", "numpy-f32", "numpy-f64", "reference", "mem-welford", "mem-numpy"):
            res[name] = measure(name, args)
        print_section1(res, args)
        sys.stdout.flush()
    if not args.skip_section2:
        folder = Path(tempfile.mkdtemp(prefix="flowdata-bench-png-"))
        try:
            g0 = time.perf_counter()
            args.png_mb = write_pngs(folder, n_png)
            print(f"  wrote {n_png:,} PNGs in {time.perf_counter() - g0:.1f} s", file=sys.stderr)
            args.folder = str(folder)
            scaling = [cpu_scaling()[1]]
            for name in ("png-plain", "png-inline", "png-inline-count", "png-proc1", "png-proc2"):
                res[name] = measure(name, args)
            scaling.append(cpu_scaling()[1])
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print_section2(res, args, scaling)
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
