"""Core benchmark: flowdata's per-sample overhead and streaming memory, side by side.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_core.py            # full (a few minutes)
    .venv/bin/python tests/benchmarks/bench_core.py --quick    # under about 2 minutes

What is measured
----------------
**Section 1 — trivial samples.** The workload (``core_flow.py``) is a Parallel source of
``n`` ints, two per-sample nodes (``doubled = x * 2``, ``plus_one = doubled + 1``) and a
plain Collect node summing them (result ``n * n``). Rows:

- *plain Python loop*: the same arithmetic inline in a ``for`` loop over a generator
  (the floor every ratio is taken against);
- *plain Python, same functions*: the module's own functions called in a loop (the
  unavoidable cost of one Python call per node per sample);
- *flowdata inline*: ``Driver.execute(["total"], inputs={"n": n})``;
- *flowdata Sequential*: the same nodes behind a ``Sequential`` source (``core_flow_seq.py``):
  one sample at a time, in order, in the calling thread;
- *flowdata processes*: the same with ``executor=flowdata.ProcessExecutor(num_workers=2)``,
  created once and reused; the first call, which starts the pool, is reported apart;
- *Hamilton dynamic*: Hamilton 1.90 ``Parallelizable``/``Collect``
  (``core_flow_hamilton.py``), with ``SynchronousLocalTaskExecutor`` for both the local
  and the remote (per-item) tasks, so it is single-threaded like flowdata inline. It
  costs milliseconds per item and grows faster than linearly, so it runs at smaller
  ``n`` (10,000 in full mode, 1,000 with ``--quick``) and once.

**Section 2 — memory of streaming.** Every sample is a distinct 1 MB ``bytes`` object,
summed by length in a Collect node (``memory_flow.py``), for ``n`` = 250, 500, 1,000.
A ``Sequential`` source streamed into a Collect must keep peak memory flat in ``n``;
a list-materialising loop grows by about 1 MB per sample. Parallel-source variants
(inline and processes) and Hamilton are shown for reference.

**Section 3 — large samples.** 24 samples whose per-sample value is a distinct 80 MB
``bytes`` object (``large_flow.py``), summed by length in a plain Collect: peak RSS over the
base. A streaming loop holds one sample; flowdata's first chunk holds one sample and later
chunks stay under about 8 MB, so it should hold a few; Hamilton (``large_flow_hamilton.py``)
is shown next to it.

**Section 4 — bytes per chunk.** What one chunk sends to a process worker
(``chunk_bytes_flow.py``: pass 2 reads a whole value and a 20,000-float input), counted by
pickling every task the pool is handed (``ProcessPoolExecutor.submit`` wrapped), in
chunks of 100 samples.

How it is measured
------------------
Every (row, n) runs in a fresh interpreter (this script re-run with ``--row NAME --n N``)
so that peak RSS belongs to that row alone. Peak RSS is ``getrusage(RUSAGE_SELF).ru_maxrss``
at the end of the row; *base* is the same high-water mark read after imports and graph
building, before any work, so ``peak - base`` is what the work itself added. For the
process executor the pool is closed (its workers reaped) before reading
``RUSAGE_CHILDREN``, which gives the largest worker's peak; forked workers count the
pages they share with the parent, so their figure starts near the parent's base.

Section 1 times are the best of ``--repeats`` (default 3) runs after one warm-up run
(for the process executor the first call is the warm-up). Hamilton and section 2 rows
run once. Times are wall-clock ``perf_counter`` and exclude interpreter start, imports
and graph building.

How to read it
--------------
- ``µs/sample``: wall time of one ``execute()`` divided by ``n``.
- Ratios ``x / plain loop`` are the framework's overhead factor on trivial work; real
  nodes (decoding, transforms) cost far more than the arithmetic here, so this is the
  worst case.
- *Linearity*: µs/sample at 100,000 over µs/sample at 10,000; near 1.0 means cost grows
  linearly with ``n``. The Hamilton growth line shows the same ratio for Hamilton
  (about ``n2 / n1`` when cost grows with ``n**2``).
- Section 2 *growth* is ``peak(n_max) - peak(n_min)`` in MB; "flat" means under a tenth
  of the data added between the two sizes.

The script only reports; it asserts nothing about time or memory. pytest does not
collect it (``norecursedirs`` excludes ``tests/benchmarks``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
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

NUM_WORKERS = 2
BLOB_BYTES = 1_000_000
CORE_SIZES = (10_000, 100_000)
MEMORY_SIZES = (250, 500, 1_000)
ROW_TIMEOUT_S = 900


# --- one row, in its own interpreter --------------------------------------------------------


@dataclass
class Measurement:
    """What one (row, n) run reports back to the parent process.

    Attributes:
        row: Row name (a key of ``ROWS``).
        n: Number of samples.
        us_per_sample: Wall time per sample, in microseconds.
        rss_base_mb: Peak RSS after imports and building, before the work.
        rss_peak_mb: Peak RSS of the process at the end.
        rss_workers_mb: Largest peak RSS among reaped child processes (process executor).
        correct: Whether the result equals the expected value.
        notes: Extra figures (build time, first-call time, ...).
        error: Why the row produced no figures, if it failed.
    """

    row: str
    n: int
    us_per_sample: float | None = None
    rss_base_mb: float | None = None
    rss_peak_mb: float | None = None
    rss_workers_mb: float | None = None
    correct: bool | None = None
    notes: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def _once(work: Callable[[], Any]) -> tuple[float, Any]:
    """Wall time of a single call of ``work`` and its result."""
    t0 = time.perf_counter()
    result = work()
    return time.perf_counter() - t0, result


def _ints(n: int) -> Iterator[int]:
    """The plain-Python source: the same generator as ``core_flow.items``."""
    yield from range(n)


def _blob(i: int) -> bytes:
    """A distinct 1 MB sample; the same bytes as ``memory_flow.make_blob`` (not imported, so
    the plain rows do not pay for importing flowdata)."""
    return bytes((i % 256,)) * BLOB_BYTES


CORE_ROWS = ("plain-loop", "plain-calls", "flowdata-inline", "flowdata-sequential", "flowdata-processes")

RowFn = Callable[[int, int], Measurement]
ROWS: bc.Rows[RowFn] = bc.Rows()
row = ROWS.row  # registers ``fn(n, repeats) -> Measurement`` as a row


def _measured(name: str, n: int, seconds: float, result: Any, expected: Any, base: float, **notes: float) -> Measurement:
    return Measurement(
        row=name,
        n=n,
        us_per_sample=seconds / n * 1e6,
        rss_base_mb=base,
        rss_peak_mb=bc.maxrss_mb(),
        correct=result == expected,
        notes=dict(notes),
    )


# Section 1 rows.


@row("plain-loop", "plain Python loop")
def _plain_loop(n: int, repeats: int) -> Measurement:
    def work() -> int:
        total = 0
        for x in _ints(n):
            doubled = x * 2
            plus_one = doubled + 1
            total += plus_one
        return total

    base = bc.maxrss_mb()
    seconds, result = bc.best_of(work, repeats)
    return _measured("plain-loop", n, seconds, result, n * n, base)


@row("plain-calls", "plain Python, same functions")
def _plain_calls(n: int, repeats: int) -> Measurement:
    import importlib

    m = importlib.import_module("core_flow")  # by name: it lives next to this script

    def work() -> int:
        return int(m.total(m.plus_one(m.doubled(x)) for x in m.items(n)))

    base = bc.maxrss_mb()
    seconds, result = bc.best_of(work, repeats)
    return _measured("plain-calls", n, seconds, result, n * n, base)


@row("flowdata-inline", "flowdata execute() inline")
def _flowdata_inline(n: int, repeats: int) -> Measurement:
    dr, build_ms = bc.flowdata_driver("core_flow")
    base = bc.maxrss_mb()
    seconds, result = bc.best_of(lambda: dr.execute(["total"], inputs={"n": n})["total"], repeats)
    return _measured("flowdata-inline", n, seconds, result, n * n, base, build_ms=build_ms)


@row("flowdata-sequential", "flowdata execute() Sequential")
def _flowdata_sequential(n: int, repeats: int) -> Measurement:
    dr, build_ms = bc.flowdata_driver("core_flow_seq")
    base = bc.maxrss_mb()
    seconds, result = bc.best_of(lambda: dr.execute(["total"], inputs={"n": n})["total"], repeats)
    return _measured("flowdata-sequential", n, seconds, result, n * n, base, build_ms=build_ms)


@row("flowdata-processes", f"flowdata processes ({NUM_WORKERS} workers)")
def _flowdata_processes(n: int, repeats: int) -> Measurement:
    import flowdata as fd

    dr, build_ms = bc.flowdata_driver("core_flow")
    base = bc.maxrss_mb()
    ex = fd.ProcessExecutor(num_workers=NUM_WORKERS)
    try:
        first_s, _ = _once(lambda: dr.execute(["total"], inputs={"n": n}, executor=ex))
        # The first call (pool start, worker imports) is the warm-up.
        seconds, result = bc.best_of(
            lambda: dr.execute(["total"], inputs={"n": n}, executor=ex)["total"], repeats, warm_up=False
        )
    finally:
        ex.close()  # reaps the workers, so RUSAGE_CHILDREN covers them
    m = _measured("flowdata-processes", n, seconds, result, n * n, base, build_ms=build_ms, first_call_ms=first_s * 1e3)
    m.rss_workers_mb = bc.maxrss_mb(resource.RUSAGE_CHILDREN)
    return m


@row("hamilton", "Hamilton 1.90 dynamic (sync)")
def _hamilton(n: int, repeats: int) -> Measurement:
    dr, build_ms = bc.hamilton_driver("core_flow_hamilton")
    base = bc.maxrss_mb()
    seconds, result = _once(lambda: dr.execute(["total"], inputs={"n": n})["total"])
    return _measured("hamilton", n, seconds, result, n * n, base, build_ms=build_ms)


# Section 2 rows (1 MB samples; one run each).


@row("mem-stream", "plain streaming loop")
def _mem_stream(n: int, repeats: int) -> Measurement:
    base = bc.maxrss_mb()
    seconds, result = _once(lambda: sum(len(_blob(i)) for i in range(n)))
    return _measured("mem-stream", n, seconds, result, n * BLOB_BYTES, base)


@row("mem-list", "plain list (materialise first)")
def _mem_list(n: int, repeats: int) -> Measurement:
    def work() -> int:
        blobs = [_blob(i) for i in range(n)]
        return sum(len(b) for b in blobs)

    base = bc.maxrss_mb()
    seconds, result = _once(work)
    return _measured("mem-list", n, seconds, result, n * BLOB_BYTES, base)


@row("mem-flowdata-seq", "flowdata Sequential -> Collect")
def _mem_flowdata_seq(n: int, repeats: int) -> Measurement:
    dr, build_ms = bc.flowdata_driver("memory_flow")
    base = bc.maxrss_mb()
    seconds, result = _once(lambda: dr.execute(["total_length"], inputs={"n": n})["total_length"])
    return _measured("mem-flowdata-seq", n, seconds, result, n * BLOB_BYTES, base, build_ms=build_ms)


@row("mem-flowdata-par", "flowdata Parallel inline (ref.)")
def _mem_flowdata_par(n: int, repeats: int) -> Measurement:
    dr, build_ms = bc.flowdata_driver("memory_flow")
    base = bc.maxrss_mb()
    out = "parallel_total_length"
    seconds, result = _once(lambda: dr.execute([out], inputs={"n": n})[out])
    return _measured("mem-flowdata-par", n, seconds, result, n * BLOB_BYTES, base, build_ms=build_ms)


@row("mem-flowdata-par-proc", f"flowdata Parallel processes({NUM_WORKERS}) (ref.)")
def _mem_flowdata_par_proc(n: int, repeats: int) -> Measurement:
    import flowdata as fd

    dr, build_ms = bc.flowdata_driver("memory_flow")
    base = bc.maxrss_mb()
    out = "parallel_total_length"
    with fd.ProcessExecutor(num_workers=NUM_WORKERS) as ex:
        seconds, result = _once(lambda: dr.execute([out], inputs={"n": n}, executor=ex)[out])
    m = _measured("mem-flowdata-par-proc", n, seconds, result, n * BLOB_BYTES, base, build_ms=build_ms)
    m.rss_workers_mb = bc.maxrss_mb(resource.RUSAGE_CHILDREN)
    return m


@row("mem-hamilton", "Hamilton Parallelizable -> Collect")
def _mem_hamilton(n: int, repeats: int) -> Measurement:
    dr, build_ms = bc.hamilton_driver("memory_flow_hamilton")
    base = bc.maxrss_mb()
    seconds, result = _once(lambda: dr.execute(["total_length"], inputs={"n": n})["total_length"])
    return _measured("mem-hamilton", n, seconds, result, n * BLOB_BYTES, base, build_ms=build_ms)


# Section 3 rows (80 MB samples; one run each).

LARGE_N = 24
LARGE_BYTES = 80 << 20


@row("large-stream", "plain streaming loop")
def _large_stream(n: int, repeats: int) -> Measurement:
    base = bc.maxrss_mb()
    seconds, result = _once(lambda: sum(len(bytes((i % 256,)) * LARGE_BYTES) for i in range(n)))
    return _measured("large-stream", n, seconds, result, n * LARGE_BYTES, base)


@row("large-flowdata", "flowdata execute() inline")
def _large_flowdata(n: int, repeats: int) -> Measurement:
    dr, build_ms = bc.flowdata_driver("large_flow")
    base = bc.maxrss_mb()
    seconds, result = _once(lambda: dr.execute(["total_bytes"], inputs={"n": n})["total_bytes"])
    return _measured("large-flowdata", n, seconds, result, n * LARGE_BYTES, base)


@row("large-flowdata-proc", f"flowdata processes({NUM_WORKERS})")
def _large_flowdata_proc(n: int, repeats: int) -> Measurement:
    import flowdata as fd

    dr, build_ms = bc.flowdata_driver("large_flow")
    base = bc.maxrss_mb()
    with fd.ProcessExecutor(num_workers=NUM_WORKERS) as ex:
        seconds, result = _once(lambda: dr.execute(["total_bytes"], inputs={"n": n}, executor=ex)["total_bytes"])
    m = _measured("large-flowdata-proc", n, seconds, result, n * LARGE_BYTES, base)
    m.rss_workers_mb = bc.maxrss_mb(resource.RUSAGE_CHILDREN)
    return m


@row("large-hamilton", "Hamilton Parallelizable -> Collect")
def _large_hamilton(n: int, repeats: int) -> Measurement:
    dr, build_ms = bc.hamilton_driver("large_flow_hamilton")
    base = bc.maxrss_mb()
    seconds, result = _once(lambda: dr.execute(["total_bytes"], inputs={"n": n})["total_bytes"])
    return _measured("large-hamilton", n, seconds, result, n * LARGE_BYTES, base)


@row("chunk-bytes", "flowdata processes, bytes per chunk")
def _chunk_bytes(n: int, repeats: int) -> Measurement:
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    import flowdata as fd

    sent: list[int] = []
    submit = ProcessPoolExecutor.submit

    def counting(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        sent.append(len(pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)))
        return submit(self, fn, *args, **kwargs)

    ProcessPoolExecutor.submit = counting  # type: ignore[method-assign]
    dr, _ = bc.flowdata_driver("chunk_bytes_flow")
    inputs = {"n": n, "table": [float(i) for i in range(20_000)]}
    base = bc.maxrss_mb()
    with fd.ProcessExecutor(num_workers=NUM_WORKERS) as ex:
        seconds, result = _once(lambda: dr.execute(["shifted_sum"], inputs=inputs, executor=ex, chunk_size=100))
    expected = sum(float(i % 7) for i in range(n))
    expected = sum(v - expected + float(int(v)) for v in (float(i % 7) for i in range(n)))
    m = _measured("chunk-bytes", n, seconds, result["shifted_sum"], expected, base)
    m.notes = {"bytes_per_chunk": sum(sent) / max(len(sent), 1), "chunks": float(len(sent))}
    return m


def print_large(results: Results) -> None:
    """Section 3: what 24 samples of 80 MB add to the peak."""
    print(f"\nSection 3 - large samples: {LARGE_N} values of 80 MB summed by a Collect  (peak RSS MB; one run)")
    header = f"{'row':<38}{'base':>8}{'peak':>9}{'added':>9}{'samples held':>14}{'workers MB':>12}  result"
    print(header)
    print("-" * len(header))
    for name in ("large-stream", "large-flowdata", "large-flowdata-proc", "large-hamilton"):
        m = results.by_key.get((name, LARGE_N))
        if m is None:
            continue
        added = None if m.rss_peak_mb is None or m.rss_base_mb is None else m.rss_peak_mb - m.rss_base_mb
        held = "-" if added is None else f"{added / (LARGE_BYTES / 2**20):.1f}"
        print(f"{ROWS[name].label:<38}{_fmt_mb(m.rss_base_mb):>8}{_fmt_mb(m.rss_peak_mb):>9}{_fmt_mb(added):>9}"
              f"{held:>14}{_fmt_mb(m.rss_workers_mb):>12}  {_status(m)}")


def run_row(name: str, n: int, repeats: int) -> None:
    """Child mode: measures one row and prints its :class:`Measurement` as a tagged JSON line."""
    m = ROWS[name].fn(n, repeats)
    bc.emit(m)


# --- the parent: run every row in a fresh interpreter, print the tables ---------------------


def measure(name: str, n: int, repeats: int) -> Measurement:
    """Runs one row in a fresh interpreter and parses what it reports."""
    argv = ["--row", name, "--n", str(n), "--repeats", str(repeats)]
    out = bc.run_child(__file__, f"{name:<22} n={n:>7,}", argv, ROW_TIMEOUT_S)
    return Measurement(name, n, error=out) if isinstance(out, str) else Measurement(**out)


def machine_description() -> list[str]:
    """A description of the machine and the software measured."""
    return [
        *bc.machine_lines(),
        f"packages  flowdata {bc.version('flowdata')}, hamilton {bc.hamilton_version()}; "
        f"multiprocessing start method: {bc.start_method()}",
    ]


def _fmt_us(x: float | None) -> str:
    if x is None:
        return "-"
    if x < 10:
        return f"{x:.3f}"
    if x < 1000:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def _fmt_mb(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    r = a / b
    return f"{r:,.0f}x" if r >= 100 else f"{r:.2f}x"


def _status(m: Measurement) -> str:
    if m.error is not None:
        return f"ERROR: {m.error}"
    return "ok" if m.correct else "WRONG RESULT"


@dataclass
class Results:
    """Every measurement, by (row, n)."""

    by_key: dict[tuple[str, int], Measurement] = field(default_factory=dict)

    def add(self, m: Measurement) -> None:
        self.by_key[(m.row, m.n)] = m

    def us(self, name: str, n: int) -> float | None:
        m = self.by_key.get((name, n))
        return None if m is None else m.us_per_sample


def print_core(results: Results, sizes: Sequence[int], hamilton_sizes: Sequence[int]) -> None:
    """Section 1: the trivial-sample table, its ratios and the growth checks."""
    print("\nSection 1 - trivial samples: items(n) -> x*2 -> +1 -> Collect sum  (time: best of repeats)")
    header = f"{'row':<34}{'n':>9}{'µs/sample':>12}{'peak RSS MB':>13}{'base MB':>9}{'workers MB':>12}  result / notes"
    print(header)
    print("-" * len(header))
    order = [(r, n) for n in sizes for r in CORE_ROWS]
    for n in hamilton_sizes:
        if n not in sizes:  # flowdata at Hamilton's sizes, for the Hamilton / flowdata ratio
            order.append(("flowdata-inline", n))
        order.append(("hamilton", n))
    for name, n in order:
        m = results.by_key.get((name, n))
        if m is None:
            continue
        notes = [_status(m)]
        if "first_call_ms" in m.notes:
            notes.append(f"first call incl. pool start {m.notes['first_call_ms']:,.0f} ms")
        if name == "hamilton":
            notes.append("single run")
        if name == "flowdata-inline" and "build_ms" in m.notes:
            notes.append(f"first build() {m.notes['build_ms']:,.0f} ms")
        print(
            f"{ROWS[name].label:<34}{n:>9,}{_fmt_us(m.us_per_sample):>12}{_fmt_mb(m.rss_peak_mb):>13}"
            f"{_fmt_mb(m.rss_base_mb):>9}{_fmt_mb(m.rss_workers_mb):>12}  {'; '.join(notes)}"
        )

    print("\nRatios (µs/sample over µs/sample)")
    for n in sizes:
        plain = results.us("plain-loop", n)
        print(f"  n={n:>7,}  flowdata inline / plain loop     {_ratio(results.us('flowdata-inline', n), plain):>10}")
        print(f"  n={n:>7,}  flowdata processes / plain loop  {_ratio(results.us('flowdata-processes', n), plain):>10}")
        print(f"  n={n:>7,}  plain same functions / plain loop{_ratio(results.us('plain-calls', n), plain):>10}")
        print(f"  n={n:>7,}  flowdata Sequential / plain loop {_ratio(results.us('flowdata-sequential', n), plain):>10}")
        print(f"  n={n:>7,}  flowdata Sequential / Parallel   "
              f"{_ratio(results.us('flowdata-sequential', n), results.us('flowdata-inline', n)):>10}")
        seq, calls = results.us("flowdata-sequential", n), results.us("plain-calls", n)
        if seq is not None and calls is not None:
            print(f"  n={n:>7,}  Sequential over the user's functions: {seq - calls:.3f} µs/sample")
    for n in hamilton_sizes:
        print(
            f"  n={n:>7,}  Hamilton / flowdata inline       "
            f"{_ratio(results.us('hamilton', n), results.us('flowdata-inline', n)):>10}"
        )

    small, large = sizes[0], sizes[-1]
    print("\nLinearity (µs/sample at the larger n over the smaller; 1.00 = linear)")
    print(
        f"  flowdata inline     n={small:,} -> {large:,}: {_fmt_us(results.us('flowdata-inline', small))} -> "
        f"{_fmt_us(results.us('flowdata-inline', large))} µs  = {_ratio(results.us('flowdata-inline', large), results.us('flowdata-inline', small))}"
    )
    print(
        f"  flowdata processes  n={small:,} -> {large:,}: {_fmt_us(results.us('flowdata-processes', small))} -> "
        f"{_fmt_us(results.us('flowdata-processes', large))} µs  = "
        f"{_ratio(results.us('flowdata-processes', large), results.us('flowdata-processes', small))}"
    )
    if not hamilton_sizes:
        return
    h1, h2 = hamilton_sizes[0], hamilton_sizes[-1]
    print(
        f"  Hamilton dynamic    n={h1:,} -> {h2:,}: {_fmt_us(results.us('hamilton', h1))} -> "
        f"{_fmt_us(results.us('hamilton', h2))} µs  = {_ratio(results.us('hamilton', h2), results.us('hamilton', h1))}"
        f"  (cost growing with n**2 would give about {h2 / h1:.2f}x)"
    )


def print_memory(results: Results, sizes: Sequence[int]) -> None:
    """Section 2: peak RSS per n for 1 MB samples, and how much it grows."""
    print(f"\nSection 2 - memory: {len(sizes)} sizes of 1 MB samples summed by a Collect  (peak RSS MB; one run each)")
    cols = "".join(f"{'n=' + format(n, ','):>11}" for n in sizes)
    header = f"{'row':<38}{'base':>8}{cols}{'growth':>9}  {'µs/sample @' + format(sizes[-1], ','):>17}  verdict / notes"
    print(header)
    print("-" * len(header))
    names = ("mem-stream", "mem-list", "mem-flowdata-seq", "mem-flowdata-par", "mem-flowdata-par-proc", "mem-hamilton")
    for name in names:
        ms = [results.by_key.get((name, n)) for n in sizes]
        if all(m is None for m in ms):
            continue
        peaks = [None if m is None else m.rss_peak_mb for m in ms]
        base = ms[0].rss_base_mb if ms[0] is not None else None
        errors = [m for m in ms if m is not None and (m.error is not None or not m.correct)]
        growth: float | None = None
        if peaks[0] is not None and peaks[-1] is not None:
            growth = peaks[-1] - peaks[0]
        notes: list[str] = []
        if errors:
            notes.append(_status(errors[0]))
        elif growth is not None:
            added_mb = (sizes[-1] - sizes[0]) * BLOB_BYTES / 2**20
            notes.append("flat" if growth < added_mb / 10 else "grows with n")
        workers = [m.rss_workers_mb for m in ms if m is not None and m.rss_workers_mb is not None]
        if workers:
            notes.append("workers peak " + "/".join(f"{w:,.0f}" for w in workers) + " MB")
        last = ms[-1]
        cells = "".join(f"{_fmt_mb(p):>11}" for p in peaks)
        print(
            f"{ROWS[name].label:<38}{_fmt_mb(base):>8}{cells}{_fmt_mb(growth):>9}"
            f"  {_fmt_us(None if last is None else last.us_per_sample):>17}  {'; '.join(notes)}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Parses arguments; runs one row (child mode) or the whole benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="Hamilton at n=1,000/2,000 instead of 10,000")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per fast row (best is kept)")
    parser.add_argument("--skip-hamilton", action="store_true", help="leave out the Hamilton rows")
    parser.add_argument("--skip-memory", action="store_true", help="leave out section 2")
    parser.add_argument("--skip-large", action="store_true", help="leave out section 3")
    parser.add_argument("--row", choices=sorted(ROWS), help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.row is not None:
        run_row(args.row, args.n, args.repeats)
        return 0

    hamilton_sizes: tuple[int, ...] = () if args.skip_hamilton else ((1_000, 2_000) if args.quick else (1_000, 10_000))
    print("flowdata core benchmark" + (" (--quick)" if args.quick else ""))
    for line in machine_description():
        print("  " + line)
    sys.stdout.flush()

    t0 = time.perf_counter()
    results = Results()
    for n in CORE_SIZES:
        for name in CORE_ROWS:
            results.add(measure(name, n, args.repeats))
    for n in hamilton_sizes:
        results.add(measure("hamilton", n, args.repeats))
        if ("flowdata-inline", n) not in results.by_key:  # for the Hamilton / flowdata ratio
            results.add(measure("flowdata-inline", n, args.repeats))
    if not args.skip_memory:
        for n in MEMORY_SIZES:
            for name in ("mem-stream", "mem-list", "mem-flowdata-seq", "mem-flowdata-par", "mem-flowdata-par-proc"):
                results.add(measure(name, n, args.repeats))
            if not args.skip_hamilton:
                results.add(measure("mem-hamilton", n, args.repeats))

    if not args.skip_large:
        for name in ("large-stream", "large-flowdata", "large-flowdata-proc", "large-hamilton"):
            if name != "large-hamilton" or not args.skip_hamilton:
                results.add(measure(name, LARGE_N, args.repeats))

    print_core(results, CORE_SIZES, hamilton_sizes)
    if not args.skip_memory:
        print_memory(results, MEMORY_SIZES)
    if not args.skip_large:
        print_large(results)
    chunk = measure("chunk-bytes", 20_000, 1)
    print("\nSection 4 - bytes per chunk sent to a process worker (20,000 samples, chunks of 100)")
    if chunk.error is None:
        print(f"  {chunk.notes['bytes_per_chunk']:,.0f} bytes per chunk over {chunk.notes['chunks']:,.0f} chunks"
              f"  ({_status(chunk)})")
    else:
        print(f"  {_status(chunk)}")
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
