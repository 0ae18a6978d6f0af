"""Ranks benchmark: the statistics pass shared by ranks of torch.distributed.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_ranks.py            # 20,000 PNGs (a few minutes)
    .venv/bin/python tests/benchmarks/bench_ranks.py --quick    # 2,000 PNGs

``--pngs`` 64x64 RGB PNGs (``bench_common.write_pngs``) are written once into a temporary
folder. The workload (``ranks_flow.py``) decodes each with PIL and folds it into a
per-channel Welford (pass 1); the loader's outputs are the normalised images (pass 2).
What is timed is ``Driver.dataloader(["normalized"], ...)`` -- the index and the whole
statistics pass, no epoch -- in fresh processes, the contenders taking turns, best of
``--rounds``:

- *1 rank x 2 workers*: one process, ``num_workers=2`` (the statistics pass on a pool of 2);
- *2 ranks x 1 worker, shared*: two processes in a gloo process group on 127.0.0.1, each
  ``num_workers=1``; the ranks share the pass (this issue's behaviour);
- *2 ranks x 1 worker, each computes all*: the same two processes, each building its loader
  with ``rank=0, world_size=1`` -- every rank computes the whole pass (the behaviour before).

A rank's wall time runs from a barrier before ``dataloader()`` to a barrier after it (so it
includes waiting for the slower rank). "Samples per rank" is ``loader.report.seen`` after
the statistics pass. The shared rows also count every byte the ranks send each other
(``torch.distributed`` calls wrapped in the child): status messages, the skip gather and
the reducer-state chain, against the size of one encoded reducer state.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from bench_common import machine_lines, version, write_pngs  # noqa: E402

TAG = "RANKS_RESULT "


def _count_bytes(sent: dict[str, int]) -> None:
    """Wraps the torch.distributed calls flowdata's ranks use, adding up bytes sent."""
    import torch.distributed as dist

    def wrap(name: str, kind: str, own: Any) -> None:
        real = getattr(dist, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            tensor = args[1] if name == "all_gather" else args[0]
            if own(kwargs, args):
                sent[kind] = sent.get(kind, 0) + tensor.numel() * tensor.element_size()
            return real(*args, **kwargs)

        setattr(dist, name, counted)

    rank = dist.get_rank()
    wrap("isend", "status", lambda kw, a: True)
    wrap("send", "chain", lambda kw, a: True)
    wrap("broadcast", "chain", lambda kw, a: (a[1] if len(a) > 1 else kw.get("src")) == rank)
    wrap("all_gather", "gather", lambda kw, a: True)


def child(args: argparse.Namespace) -> None:
    """One rank (or the single process): times dataloader() and prints what it measured."""
    import torch.distributed as dist

    import flowdata as fd
    import ranks_flow
    from flowdata.run.caching.codec import encode_value
    from flowdata.stats import Welford

    world = args.world
    sent: dict[str, int] = {}
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=world)
        _count_bytes(sent)
        dist.barrier()
    dr = fd.Builder().with_modules(ranks_flow).build()
    given = {"rank": 0, "world_size": 1} if args.alone else {}
    t0 = time.perf_counter()
    loader = dr.dataloader(["normalized"], inputs={"folder": args.folder}, batch_size=64,
                           num_workers=args.workers, **given)
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - t0
    w = Welford(dim=(0, 2, 3))
    w.update(ranks_flow.pixels(str(min(Path(args.folder).glob("*.png"))))[None])
    state = len(encode_value(w.state_dict()))
    out = {"rank": args.rank, "seconds": seconds, "seen": sum(loader.report.seen.values()), "sent": sent,
           "state_bytes": state, "mean": [float(x).hex() for x in loader.stats["pixel_stats"].mean]}
    print(TAG + json.dumps(out), flush=True)
    if world > 1:
        dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(folder: str, world: int, workers: int, alone: bool) -> list[dict[str, Any]]:
    """Starts the processes of one contender and returns each one's measurement."""
    port = _port()
    cmd = [sys.executable, __file__, "--child", "--folder", folder, "--world", str(world), "--workers", str(workers),
           "--port", str(port)] + (["--alone"] if alone else [])
    procs = [subprocess.Popen([*cmd, "--rank", str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        line = next((ln for ln in out.splitlines() if ln.startswith(TAG)), None)
        if line is None:
            raise RuntimeError(f"a process failed:\n{err[-3000:]}")
        results.append(json.loads(line[len(TAG):]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pngs", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--folder")
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--alone", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    n = args.pngs or (2000 if args.quick else 20000)
    contenders = [("1 rank x 2 workers", 1, 2, False), ("2 ranks x 1 worker, shared", 2, 1, False),
                  ("2 ranks x 1 worker, each computes all", 2, 1, True)]
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as folder:
        t0 = time.perf_counter()
        mb = write_pngs(Path(folder), n, (7, 15))
        print(f"wrote {n} PNGs ({mb:.1f} MB) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        best: dict[str, list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):
            for name, world, workers, alone in contenders:
                got = run(folder, world, workers, alone)
                wall = max(r["seconds"] for r in got)
                print(f"  round {round_ + 1}: {name}: {wall:.2f} s", file=sys.stderr)
                if name not in best or wall < max(r["seconds"] for r in best[name]):
                    best[name] = got
    for line in machine_lines():
        print(line)
    print(f"torch     {version('torch')}; gloo on 127.0.0.1; {n} PNGs 64x64; best of {args.rounds} rounds")
    base = max(r["seconds"] for r in best["1 rank x 2 workers"])
    print(f"\n{'contender':42} {'wall s':>8} {'vs 1x2':>7} {'samples per rank':>22}")
    for name, *_ in contenders:
        got = best[name]
        wall = max(r["seconds"] for r in got)
        seen = " / ".join(str(r["seen"]) for r in got)
        print(f"{name:42} {wall:8.2f} {wall / base:6.2f}x {seen:>22}")
    means = {name: best[name][0]["mean"] for name, *_ in contenders}
    same = all(r["mean"] == means[contenders[0][0]] for got in best.values() for r in got)
    print(f"\nstatistics bitwise equal across contenders and ranks: {same}")
    shared = best["2 ranks x 1 worker, shared"]
    state = shared[0]["state_bytes"]
    print(f"\nbytes each rank sent (2 ranks; one Welford state, encoded, is {state} B):")
    for r in shared:
        parts = ", ".join(f"{k} {v} B" for k, v in sorted(r["sent"].items()))
        print(f"  rank {r['rank']}: {parts}; chain = {r['sent'].get('chain', 0) / state:.2f} states")


if __name__ == "__main__":
    main()
