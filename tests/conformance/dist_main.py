"""The ranks of the matrix's ``torch.distributed`` rows: ``python -m tests.conformance.dist_main OUT ROWS.json``.

Imports torch, flowdata and the matrix once, computes each row's inline reference, then
runs the rows one after the other, each in fresh processes forked from here, one per rank,
in a gloo process group of its own on 127.0.0.1 (rank and world size read from it by the
loader, so the ranks share the statistics pass and even out a stream in shards as it
goes). Each rank runs the row's loader, checks it against the reference as a hand-given
rank is checked (statistics, values, skips, warm caches, resume at every batch boundary,
in the same order on every rank so that their collectives meet) and writes
``OUT/<row id>/rank<R>.json``: its batches and padding, or the error it met.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

import torch.distributed as dist

from tests.conformance import matrix
from tests.conformance.kinds import KIND
from tests.conformance.matrix import Row

TIMEOUT = 120.0  # seconds for one row's ranks


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_main(row: Row, rank: int, port: int, out: Path) -> None:
    with open(out / f"rank{rank}.log", "ab", buffering=0) as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
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
    (out / f"rank{rank}.json").write_text(json.dumps(result))


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
        for p in procs:
            p.join(TIMEOUT)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Row(**r) for r in json.loads(Path(sys.argv[2]).read_text())])
