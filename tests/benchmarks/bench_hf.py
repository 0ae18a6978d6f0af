"""Hugging Face ``datasets`` as flowdata sources, against the Hugging Face way, side by side.

Run from the repository root (no network needed; every file goes into a temporary folder)::

    .venv/bin/python tests/benchmarks/bench_hf.py            # full (several minutes)
    .venv/bin/python tests/benchmarks/bench_hf.py --quick    # small sizes, under a minute

**Part 1 - map-style.** 50,000 generated 64x64 RGB PNGs (2,000 with ``--quick``) in a
``datasets.Dataset`` (``Image(decode=False)`` column ``image``, int ``label``), built once
and cached with ``save_to_disk`` under the temp folder (reused by later runs). Each sample is
PIL-decoded, resized to 32x32 (bilinear, antialiased) and normalised by fixed mean/std with
the same function (``hf_common.decode_resize``) in every contender; batch 64, shuffled, one
epoch at 0 and 2 workers (``--rounds`` epochs, best kept): flowdata (``hf_flow.py``, the
dataset as its source), flowdata decoding with ``flowdata.media.load_image`` instead, the
Hugging Face way (``ds.with_transform`` + a plain torch ``DataLoader``) and a hand-written
torch ``Dataset`` over the same Arrow files (pyarrow memory map, one row per
``__getitem__``). The four epochs run at once, the contenders taking turns (1 batch each at
0 workers, 50 at 2 workers; every ``next()`` timed), so that the machine's changing load
hits them alike. Target: flowdata / HF >= 1.00x. (``--quick`` only checks the script: its
2-worker epochs are shorter than one 50-batch turn.)

**Part 2 - streaming.** 200,000 rows (id, float, short string; 20,000 with ``--quick``)
in 8 Parquet shards, batch 256, 2 workers, a trivial per-sample node. Speed:
``load_dataset("parquet", streaming=True)`` through flowdata vs ``split_dataset_by_node``
(rank 0 of 1) + ``.map`` + torch ``DataLoader`` (best of 3 interleaved epochs). Reads: the
same files through ``IterableDataset.from_generator`` (one shard per file) whose generator
logs the rows it read per process, for world size 1 and 2 (ranks run one after the other),
and 3 shards (the rows re-split in 3 files) at world size 2; rows delivered (and unique
ids) vs rows read, and rows read by the main process.

**Part 3 - time to first batch** of a stream of 10^3 vs 10^6 rows
(``IterableDataset.from_generator`` over 2 ranges, 2 shards), flowdata at 0 and 2 workers
(HF + torch ``DataLoader`` for reference): from ``dr.dataloader(...)`` and from ``iter()``
to the first batch, best of 6; the 10^6/10^3 ratio should be about 1 (flat).

Each part runs in a fresh interpreter (this script with ``--part``) under a time limit.
The machine is noisy: only the ratios within one run mean much.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_common as bc  # noqa: E402

SIZES = {False: {"images": 50_000, "rows": 200_000}, True: {"images": 2_000, "rows": 20_000}}
TIMEOUT_S = {"map-w0": 1200, "map-w2": 900, "stream": 900, "first": 600}
MAP_BATCH, STREAM_BATCH, SEED = 64, 256, 0
MAP_ROWS = {"flow": "flowdata (shared PIL decode)", "flow-media": "flowdata (media.load_image)",
            "hf": "HF with_transform + DataLoader", "hand": "hand-written torch Dataset"}


@dataclass
class Result:
    part: str
    figures: dict[str, float] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)


def _driver() -> Any:
    import hf_flow

    import flowdata

    return flowdata.Builder().with_modules(hf_flow).build()


# --- part 1: map-style ------------------------------------------------------------------------


def part_map(args: argparse.Namespace, workers: int) -> Result:
    import datasets
    import hf_common
    import torch

    ds = datasets.load_from_disk(args.data)
    dr, res, cache = _driver(), Result(f"map-w{workers}"), tempfile.mkdtemp(prefix="bench-hf-fd-")

    def torch_loader(dataset: Any, w: int) -> Any:
        return torch.utils.data.DataLoader(dataset, batch_size=MAP_BATCH, shuffle=True, num_workers=w,
                                           generator=torch.Generator().manual_seed(SEED))

    builds = {
        "flow": lambda d, w: dr.dataloader(["pixels", "label"], inputs={"data": d}, batch_size=MAP_BATCH,
                                           shuffle=True, seed=SEED, num_workers=w, cache_dir=cache),
        "flow-media": lambda d, w: dr.dataloader(["pixels_media", "label"], inputs={"data": d}, batch_size=MAP_BATCH,
                                                 shuffle=True, seed=SEED, num_workers=w, cache_dir=cache),
        "hf": lambda d, w: torch_loader(d.with_transform(hf_common.hf_transform), w),
        "hand": lambda d, w: torch_loader(hf_common.ArrowImages([f["filename"] for f in d.cache_files]), w),
    }
    small = ds.select(range(2 * MAP_BATCH))
    for build in builds.values():  # imports and lazy set-up, untimed
        for _ in build(small, 0):
            pass
    key = {name: "pixels_media" if name == "flow-media" else "pixels" for name in builds}
    sums: dict[str, float] = {}
    for r in range(args.rounds):
        order = list(builds)[:: 1 if (r + workers // 2) % 2 == 0 else -1]  # reversed every other round
        loaders, built, spent = {}, {}, {}
        for name in order:
            t0 = time.perf_counter()
            loaders[name] = builds[name](ds, workers)
            built[name] = time.perf_counter() - t0
        count = dict.fromkeys(order, 0)
        sums = dict.fromkeys(order, 0.0)
        # The contenders take turns, ``turn`` batches each (each next() timed), so that a change
        # of the machine's load hits them alike. With workers, a loader's idle workers refill its
        # prefetch queue (prefetch_factor x workers batches) during the next one's turn: every
        # contender is charged that refill of the one before it; with 50-batch turns this pulls the
        # ratios towards 1 by at most ~8% of their difference from 1.
        turn = 1 if workers == 0 else 50
        its = {}
        for name in order:  # iter() starts the workers: timed with the epoch
            t0 = time.perf_counter()
            its[name] = iter(loaders[name])
            spent[name] = time.perf_counter() - t0
        while its:
            for name in list(its):
                for _ in range(turn):
                    t1 = time.perf_counter()
                    batch = next(its[name], None)
                    spent[name] += time.perf_counter() - t1
                    if batch is None:
                        del its[name]
                        break
                    count[name] += len(batch[key[name]])
                    sums[name] += float(batch[key[name]].double().sum())
        for name in order:
            if spent[name] < res.figures.get(f"{name}.epoch_s", float("inf")):
                res.figures |= {f"{name}.build_s": built[name], f"{name}.epoch_s": spent[name], f"{name}.n": count[name]}
            res.checks[f"{name} yields every row"] = count[name] == len(ds)
    res.checks["same pixels (sum) in every contender"] = max(sums.values()) - min(sums.values()) <= 1e-6 * abs(sums["hf"])
    shutil.rmtree(cache, ignore_errors=True)
    return res


# --- part 2: streaming --------------------------------------------------------------------------


def _hf_stream(ds: Any, rank: int, world_size: int, workers: int) -> Any:
    import hf_common
    import torch
    from datasets.distributed import split_dataset_by_node

    part = split_dataset_by_node(ds, rank=rank, world_size=world_size).map(hf_common.hf_value, remove_columns=["x", "s"])
    return torch.utils.data.DataLoader(part, batch_size=STREAM_BATCH, num_workers=workers)


def _flow_stream(dr: Any, ds: Any, rank: int, world_size: int, workers: int) -> Any:
    return dr.dataloader(["id", "value"], inputs={"data": ds}, batch_size=STREAM_BATCH, num_workers=workers,
                         rank=rank, world_size=world_size)


def _ids(loader: Any) -> list[int]:
    return [i for batch in loader for i in batch["id"].tolist()]


def part_stream(args: argparse.Namespace) -> Result:
    import datasets
    import hf_common

    dr, res, rows = _driver(), Result("stream"), args.rows
    files = {k: sorted(str(p) for p in Path(args.parquet, str(k)).glob("*.parquet")) for k in (8, 3)}
    pq = datasets.load_dataset("parquet", data_files=files[8], split="train", streaming=True)
    makers = {"flow": lambda: _flow_stream(dr, pq, 0, 1, 2), "hf": lambda: _hf_stream(pq, 0, 1, 2)}
    for make in makers.values():  # imports, page cache
        _ids(make())
    for r in range(3):
        for name in list(makers)[r % 2 :] + list(makers)[: r % 2]:
            t0 = time.perf_counter()
            n = len(_ids(makers[name]()))
            seconds = time.perf_counter() - t0
            res.figures[f"speed.{name}"] = max(res.figures.get(f"speed.{name}", 0.0), n / seconds)
            res.checks[f"{name} parquet epoch yields every row"] = n == rows
    for shards, world in ((8, 1), (8, 2), (3, 2)):
        for name in ("flow", "hf"):
            counter = Path(tempfile.mkdtemp(prefix="bench-hf-count-"))
            ds = datasets.IterableDataset.from_generator(
                hf_common.counted_parquet_rows, gen_kwargs={"files": files[shards], "counter": str(counter)})
            ids: list[int] = []
            for rank in range(world):
                ids += _ids(_flow_stream(dr, ds, rank, world, 2) if name == "flow" else _hf_stream(ds, rank, world, 2))
            logs = [line.split() for f in counter.glob("*.txt") for line in f.read_text().splitlines()]
            key = f"reads.{shards}.{world}.{name}"
            res.figures |= {f"{key}.delivered": len(ids), f"{key}.unique": len(set(ids)),
                            f"{key}.read": sum(int(n) for _, _, n in logs),
                            f"{key}.main": sum(int(n) for pid, _, n in logs if int(pid) == os.getpid())}
            shutil.rmtree(counter, ignore_errors=True)
    return res


# --- part 3: time to first batch -----------------------------------------------------------------


def part_first(args: argparse.Namespace) -> Result:
    import datasets
    import hf_common

    dr, res = _driver(), Result("first")
    streams = {n: datasets.IterableDataset.from_generator(
        hf_common.range_rows, gen_kwargs={"ranges": [(0, n // 2), (n // 2, n)]}) for n in (10**3, 10**6)}
    for r in range(6):  # rounds, sizes in turn (order flipped every round: the first after a switch is slower)
        for name, w in (("flow", 0), ("flow", 2), ("hf", 0), ("hf", 2)):
            for n, ds in list(streams.items())[:: 1 if r % 2 == 0 else -1]:
                t0 = time.perf_counter()
                loader = _flow_stream(dr, ds, 0, 1, w) if name == "flow" else _hf_stream(ds, 0, 1, w)
                t1 = time.perf_counter()
                it = iter(loader)
                batch = next(it)
                t2 = time.perf_counter()
                for what, seconds in (("build", t2 - t0), ("iter", t2 - t1)):
                    key = f"{name}.{w}.{n}.{what}"
                    res.figures[key] = min(res.figures.get(key, float("inf")), seconds)
                res.checks[f"{name} w{w} first batch of {n}"] = len(batch["id"]) == STREAM_BATCH
                del it, loader  # stops the workers
    return res


# --- the parent: data, children, tables ------------------------------------------------------------


def make_map_dataset(n: int, tmp: Path) -> Path:
    """The image dataset, saved under the temp folder once and reused by later runs."""
    import datasets
    import hf_common

    target = Path(tempfile.gettempdir()) / f"flowdata-bench-hf-images-{n}"
    if not (target / "dataset_info.json").exists():
        t0 = time.perf_counter()
        step = -(-n // 8)
        ds = datasets.Dataset.from_generator(
            hf_common.image_rows, gen_kwargs={"ranges": [(a, min(n, a + step)) for a in range(0, n, step)]},
            features=datasets.Features({"image": datasets.Image(decode=False), "label": datasets.Value("int64")}),
            cache_dir=str(tmp / "hf-cache"), num_proc=2)
        staging = tmp / "staging"
        ds.save_to_disk(str(staging))
        shutil.move(str(staging), target)
        print(f"  wrote {n:,} PNGs into {target} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return target


def make_parquet(rows: int, tmp: Path) -> Path:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    for shards in (8, 3):
        (tmp / str(shards)).mkdir(parents=True)
        for k, ids in enumerate(np.array_split(np.arange(rows), shards)):
            table = pa.table({"id": ids, "x": ids * 0.5, "s": [f"row-{i}" for i in ids]})
            pq.write_table(table, tmp / str(shards) / f"part-{k}.parquet")
    return tmp


def _x(a: float | None, b: float | None) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}x"


def _load(r: dict[str, Any]) -> str:
    x = r["figures"].get("other_load", -1.0)
    return "other load ?" if x < 0 else f"other load {x:.0%}"


def print_tables(res: dict[str, Any], args: argparse.Namespace) -> None:
    size = SIZES[args.quick]
    print(f"\nPart 1 - map-style: {size['images']:,} PNGs 64x64 -> 32x32 normalised, batch {MAP_BATCH}, shuffled, "
          f"best of {args.rounds} epoch(s), contenders taking turns")
    print(f"{'contender':<34}{'workers':>8}{'samples/s':>11}{'x HF':>8}{'x hand':>8}{'build ms':>10}")
    for w in (0, 2):
        r = res[f"map-w{w}"]
        if isinstance(r, str):
            print(f"  {w} workers: {r}")
            continue
        f = r["figures"]
        speed = {k: f[f"{k}.n"] / f[f"{k}.epoch_s"] for k in MAP_ROWS}

        for k, label in MAP_ROWS.items():
            print(f"{label:<34}{w:>8}{speed[k]:>11,.0f}{_x(speed[k], speed['hf']):>8}{_x(speed[k], speed['hand']):>8}"
                  f"{f[f'{k}.build_s'] * 1e3:>10.1f}")
        bad = [k for k, ok in r["checks"].items() if not ok]
        print(f"  {w} workers: flowdata/HF {_x(speed['flow'], speed['hf'])} (target >= 1.00x: "
              f"{'met' if speed['flow'] >= speed['hf'] else 'MISSED'}), flowdata/hand {_x(speed['flow'], speed['hand'])}; "
              f"checks {'ok' if not bad else 'FAILED: ' + ', '.join(bad)}; {_load(r)}")
    r = res["stream"]
    print(f"\nPart 2 - streaming: {size['rows']:,} rows, batch {STREAM_BATCH}, 2 workers")
    if isinstance(r, str):
        print(f"  {r}")
    else:
        f = r["figures"]
        print(f"  parquet (8 shards), best of 3 epochs: flowdata {f['speed.flow']:,.0f} samples/s, "
              f"HF split_dataset_by_node + DataLoader {f['speed.hf']:,.0f} samples/s; flowdata/HF {_x(f['speed.flow'], f['speed.hf'])}")
        print(f"{'shards':>6}{'ranks':>6}  {'pipeline':<10}{'delivered':>10}{'unique':>9}{'rows read':>11}{'read/rows':>10}{'read by main':>13}")
        for shards, world in ((8, 1), (8, 2), (3, 2)):
            for name in ("flow", "hf"):
                k = f"reads.{shards}.{world}.{name}"
                print(f"{shards:>6}{world:>6}  {'flowdata' if name == 'flow' else 'HF':<10}{f[k + '.delivered']:>10,.0f}"
                      f"{f[k + '.unique']:>9,.0f}{f[k + '.read']:>11,.0f}{f[k + '.read'] / size['rows']:>9.2f}x{f[k + '.main']:>13,.0f}")
        bad = [k for k, ok in r["checks"].items() if not ok]
        print(f"  checks {'ok' if not bad else 'FAILED: ' + ', '.join(bad)}; {_load(r)}")
    r = res["first"]
    print(f"\nPart 3 - time to first batch (batch {STREAM_BATCH}), stream of 10^3 vs 10^6 rows, 2 shards, best of 6 (ms)")
    if isinstance(r, str):
        print(f"  {r}")
        return
    f = r["figures"]
    print(f"{'pipeline':<30}{'from':>12}{'10^3':>9}{'10^6':>9}{'10^6/10^3':>11}")
    for name, w in (("flow", 0), ("flow", 2), ("hf", 0), ("hf", 2)):
        for what, label in (("build", "dataloader()"), ("iter", "iter()")):
            a, b = f[f"{name}.{w}.1000.{what}"], f[f"{name}.{w}.1000000.{what}"]
            title = f"{'flowdata' if name == 'flow' else 'HF + DataLoader (ref.)'} w={w}"
            print(f"{title:<30}{label:>12}{a * 1e3:>9.1f}{b * 1e3:>9.1f}{_x(b, a):>11}")
    print(f"  checks {'ok' if all(r['checks'].values()) else 'FAILED'}; {_load(r)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (checks the script in under a minute)")
    parser.add_argument("--rounds", type=int, default=1, help="part 1: epochs per contender, best kept (default 1)")
    parser.add_argument("--parts", default=",".join(TIMEOUT_S), help="parts to run (default: all)")
    parser.add_argument("--part", choices=sorted(TIMEOUT_S), help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--parquet", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.images, args.rows = SIZES[args.quick]["images"], SIZES[args.quick]["rows"]
    if args.part:
        parts = {"map-w0": lambda: part_map(args, 0), "map-w2": lambda: part_map(args, 2),
                 "stream": lambda: part_stream(args), "first": lambda: part_first(args)}
        before = bc.cpu_snapshot()
        result = parts[args.part]()
        load = bc.other_load(before, bc.cpu_snapshot())
        result.figures["other_load"] = -1.0 if load is None else load[0]
        bc.emit(result)
        return 0
    print("flowdata bench_hf" + (" (--quick)" if args.quick else ""))
    for line in bc.machine_lines("; no GPU used"):
        print("  " + line)
    print(f"  packages  datasets {bc.version('datasets')}, torch {bc.version('torch')}, pyarrow {bc.version('pyarrow')}, "
          f"pillow {bc.version('pillow')}; start method {bc.start_method()}")
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="bench-hf-"))
    res: dict[str, Any] = {}
    try:
        common = ["--data", str(make_map_dataset(args.images, tmp)), "--parquet", str(make_parquet(args.rows, tmp / "pq"))]
        common += ["--rounds", str(args.rounds)] + (["--quick"] if args.quick else [])
        for part, limit in TIMEOUT_S.items():
            run = part in args.parts.split(",")
            res[part] = bc.run_child(__file__, part, ["--part", part, *common], limit) if run else "not run (--parts)"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_tables(res, args)
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
