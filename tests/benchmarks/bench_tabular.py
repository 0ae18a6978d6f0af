"""flowdata_modules.tabular against hand-written pandas preprocessing + a TensorDataset.

Run from the repository root (no network; the table goes into a temporary folder)::

    .venv/bin/python tests/benchmarks/bench_tabular.py               # 1,000,000 rows
    .venv/bin/python tests/benchmarks/bench_tabular.py --rows 100000 # a quick check

One Parquet file: 20 numeric columns (normal, scales from 1e-3 to 1e6, 1 % missing) and 5
category columns (10 to 5,000 distinct values, Zipf-weighted, 1 % missing) and a label of 4
classes. Batch 256, shuffled, 2 workers; each contender runs in a fresh interpreter and
does the same work -- standardise each numeric column by its mean and standard deviation
(a missing cell is the mean: 0), number each category column's values from 1 by descending
count (0 for missing), number the labels:

- ``pandas``: ``pd.read_parquet``, the statistics and codes with pandas/numpy over the
  whole table, three tensors in a ``TensorDataset``, a torch ``DataLoader`` (the usual
  hand-written way: the whole table in memory, preprocessed before the first batch);
- ``flowdata``: ``flowdata_modules.tabular``'s loader (pass 1: the statistics and
  vocabularies in one streaming pass; rows parsed in the workers).

Printed per contender: set-up (everything before iterating), time to the first batch
(from the start, set-up included), samples/s over one epoch, and two peaks of the process
tree's memory, workers included: all of it (PSS: :class:`flowdata.peak_memory.PeakMemory`),
and its anonymous part (``Pss_Anon`` of ``/proc/<pid>/smaps_rollup``: heap, which must stay
resident; the rest is file pages -- libraries, a memory-mapped table -- that the kernel can
drop and read again). Rounds alternate the contenders, best epoch kept.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import emit, machine_lines, run_child  # noqa: E402

NUMERIC = [f"x{i}" for i in range(20)]
CATEGORY = [f"c{i}" for i in range(5)]
BATCH, WORKERS = 256, 2


@dataclass(frozen=True)
class Measurement:
    setup_s: float
    first_batch_s: float
    epoch_s: float
    samples: int
    peak_mb: float
    anon_mb: float
    check: float  # the first numeric column's mean over the epoch (both must be about 0)


def write_table(path: str, rows: int, seed: int = 0) -> None:
    """The benchmark's table, as one Parquet file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    columns: dict[str, object] = {}
    for i, name in enumerate(NUMERIC):
        values = rng.normal(10.0 ** ((i % 10) - 3), 10.0 ** ((i % 10) - 3), rows)
        columns[name] = pa.array(values, mask=rng.random(rows) < 0.01)
    for i, name in enumerate(CATEGORY):
        distinct = (10, 50, 200, 1000, 5000)[i]
        weights = 1.0 / np.arange(1, distinct + 1)
        codes = rng.choice(distinct, rows, p=weights / weights.sum())
        names = np.array([f"{name}_{k}" for k in range(distinct)], dtype=object)
        columns[name] = pa.array(names[codes], mask=rng.random(rows) < 0.01)
    columns["label"] = pa.array(np.array(["a", "b", "c", "d"], dtype=object)[rng.integers(0, 4, rows)])
    pq.write_table(pa.table(columns), path, row_group_size=65536)


def _pandas_loader(path: str) -> object:
    import numpy as np
    import pandas as pd
    import torch

    df = pd.read_parquet(path)
    x = df[NUMERIC].to_numpy(np.float64)
    mean, std = np.nanmean(x, 0), np.nanstd(x, 0)
    x = np.nan_to_num((x - mean) / std, nan=0.0).astype(np.float32)
    codes = np.zeros((len(df), len(CATEGORY)), dtype=np.int64)
    for j, name in enumerate(CATEGORY):
        counts = df[name].value_counts()
        order = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ids = {v: k + 1 for k, (v, _) in enumerate(order)}
        codes[:, j] = df[name].map(ids).fillna(0).to_numpy(np.int64)
    labels = {v: k for k, (v, _) in enumerate(sorted(df["label"].value_counts().items(), key=lambda kv: (-kv[1], kv[0])))}
    y = df["label"].map(labels).to_numpy(np.int64)
    del df
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(codes), torch.from_numpy(y))
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=WORKERS,
                                       persistent_workers=True)


def _flowdata_loader(path: str) -> object:
    import flowdata as fd
    from flowdata_modules import tabular

    dr = fd.Builder().with_modules(tabular).with_config(
        {"numeric_columns": NUMERIC, "category_columns": CATEGORY, "label_column": "label"}).build()
    return dr.dataloader(["numeric", "categories", "label"], inputs={"table": path}, batch_size=BATCH, shuffle=True,
                         num_workers=WORKERS, persistent_workers=True)


class AnonPeak:
    """The peak of the process tree's summed ``Pss_Anon`` (Linux), sampled every 50 ms."""

    def __enter__(self) -> AnonPeak:
        import threading

        self.mb, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(0.05):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    with open(f"/proc/{p.pid}/smaps_rollup") as f:
                        total += next(int(line.split()[1]) for line in f if line.startswith("Pss_Anon:"))
                except (OSError, StopIteration):
                    pass
            self.mb = max(self.mb, total / 1024)


def child(contender: str, path: str) -> None:
    from flowdata.peak_memory import PeakMemory

    with PeakMemory() as peak, AnonPeak() as anon:
        start = time.perf_counter()
        loader = (_pandas_loader if contender == "pandas" else _flowdata_loader)(path)
        setup = time.perf_counter() - start
        batches = iter(loader)  # type: ignore[call-overload]
        first = next(batches)
        first_batch = time.perf_counter() - start
        del first
        samples, total = 0, 0.0
        epoch_start = time.perf_counter()
        for batch in batches:  # the rest of the epoch: samples/s after the first batch
            numeric = batch[0] if isinstance(batch, list) else batch["numeric"]
            samples += len(numeric)
            total += float(numeric[:, 0].sum())
        epoch = time.perf_counter() - epoch_start
    emit(Measurement(setup, first_batch, epoch, samples, peak.mb, anon.mb, total / max(samples, 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=2, metavar=("CONTENDER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-tabular-") as folder:  # removed at the end
        path = f"{folder}/table.parquet"
        start = time.perf_counter()
        write_table(path, args.rows)
        print("\n".join(machine_lines()))
        print(f"{args.rows} rows x {len(NUMERIC)} numeric + {len(CATEGORY)} category columns "
              f"({Path(path).stat().st_size / 1e6:.0f} MB Parquet, written in {time.perf_counter() - start:.1f} s); "
              f"batch {BATCH}, {WORKERS} workers")
        best: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):
            for contender in ("pandas", "flowdata"):  # taking turns, so that the machine's load hits both alike
                got = run_child(__file__, contender, ["--child", contender, path], timeout_s=3600)
                if isinstance(got, str):
                    print(f"{contender}: {got}")
                    continue
                if contender not in best or got["epoch_s"] < best[contender]["epoch_s"]:
                    best[contender] = got
        if "pandas" not in best:
            return
        base = best["pandas"]["samples"] / best["pandas"]["epoch_s"]
        print(f"{'contender':10} {'set-up':>8} {'1st batch':>10} {'samples/s':>10} {'vs pandas':>10} {'peak MB':>8} "
              f"{'anon MB':>8} {'mean x0':>8}")
        for name, m in best.items():
            rate = m["samples"] / m["epoch_s"]
            print(f"{name:10} {m['setup_s']:7.1f}s {m['first_batch_s']:9.1f}s {rate:10.0f} {rate / base:9.2f}x "
                  f"{m['peak_mb']:8.0f} {m['anon_mb']:8.0f} {m['check']:8.3f}")


if __name__ == "__main__":
    main()
