"""The ranks of the ``torch.distributed`` tests: ``python -m tests.ranks_cases.rank_main LAUNCH.json``.

Importing torch costs more than most cases (about 2 s of CPU a process), so this launcher
imports it, flowdata and :mod:`tests.ranks_cases.flow` once, then runs the cases of
``LAUNCH.json`` one after the other, each in **fresh processes forked from it**, one per
rank (as flowdata's own workers are forked), in a gloo process group of its own on
127.0.0.1 (a free port picked just before). Nothing a case does reaches the next one:
other processes, another group, another port.

Each rank sets its case's environment (``FD_FAIL``, ``FD_SLOW``), builds the loader of
:mod:`tests.ranks_cases.flow` with the case's options and writes what the test checks to
``<out>/rank<R>.json``: the statistics (as exact hex floats), the samples this rank
computed in the statistics pass, the samples it delivered in epoch 0 (all, and those that
are no padding), its batches' sizes, its report's skips and padded rows, and the error it
raised, if any. Its output goes to ``<out>/rank<R>.log``. Once the ranks
have ended (or been killed after the case's ``timeout``), the launcher writes
``<out>/ended.json``: their exit codes, whether the case timed out, and the ``pass-*``
files of its ``cache_dir`` at that moment.
"""

from __future__ import annotations

import glob
import importlib
import json
import multiprocessing
import os
import socket
import sys
import time
import traceback
from typing import Any


def exact(values: Any) -> list[str]:
    """Floats as hex: equal strings mean bitwise equal values."""
    import torch

    return [float(v).hex() for v in torch.as_tensor(values).double().flatten().tolist()]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_main(case: dict[str, Any], rank: int) -> None:
    """One rank of ``case``, in a process of its own."""
    began = time.monotonic()
    out = case["out"]
    with open(os.path.join(out, f"rank{rank}.log"), "ab", buffering=0) as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    os.environ["RANK"] = str(rank)
    os.environ["FD_RANK_PID"] = str(os.getpid())
    log = os.path.join(out, f"calls-rank{rank}")
    os.environ["FD_RANK_LOG"] = log
    for k, v in case.get("env", {}).items():
        os.environ[k] = v
    import torch.distributed as dist

    import flowdata as fd
    from tests.ranks_cases import flow

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{case['port']}", rank=rank,
                            world_size=case["world"])
    print(f"[{time.monotonic() - began:.2f} s] rank {rank} of {case['world']} joined the group", flush=True)
    result: dict[str, Any] = {"rank": rank}
    started = time.monotonic()
    try:
        dr = fd.Builder().with_modules(flow).build()
        loader = dr.dataloader(case["outputs"], inputs={"n": case["n"]}, batch_size=8,
                               num_workers=case["workers"], on_error=case.get("on_error", "raise"),
                               cache_dir=case.get("cache_dir"), shuffle=True, seed=3,
                               streaming=case.get("streaming", False), even_batches=case.get("even_batches", True))
        print(f"[{time.monotonic() - began:.2f} s] loader built", flush=True)
        result["pass1"] = sorted(int(line) for p in glob.glob(f"{log}-*.log") for line in open(p))
        for p in glob.glob(f"{log}-*.log"):
            os.remove(p)
        stats = loader.stats.get("stats")
        if stats is not None:
            result["stats"] = {k: exact(getattr(stats, k)) for k in ("mean", "std", "min", "max", "count")}
        if "words" in loader.stats:
            result["words"] = [list(loader.stats["words"].tokens), list(loader.stats["words"].counts)]
        if "largest" in loader.stats:
            result["largest"] = float(loader.stats["largest"]).hex()
        delivered: list[int] = []
        real: list[int] = []
        sizes: list[int] = []
        for b, batch in enumerate(loader):
            rows = [int(i) for i in batch["ident"]]
            delivered.extend(rows)
            real.extend(rows[: len(rows) - loader.padding(b)])  # the rows that repeat no sample
            sizes.append(len(rows))
        result["delivered"] = delivered
        result["real"] = real
        result["sizes"] = sizes
        result["padded"] = loader.report.padded
        print(f"[{time.monotonic() - began:.2f} s] epoch delivered", flush=True)
        result["skipped"] = sorted({s.index for s in loader.report.skipped})
    except BaseException as exc:
        result["error"] = {"type": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - started,
                           "traceback": traceback.format_exc()}
        result["pass1"] = sorted(int(line) for p in glob.glob(f"{log}-*.log") for line in open(p))
    finally:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.destroy_process_group()
        print(f"[{time.monotonic() - began:.2f} s] done", flush=True)


def run_case(case: dict[str, Any]) -> None:
    """Forks the ranks of ``case``, waits for them, and writes ``ended.json``."""
    os.makedirs(case["out"], exist_ok=True)
    case = {**case, "port": _port()}  # picked just before the ranks bind it
    fork = multiprocessing.get_context("fork")
    procs = [fork.Process(target=rank_main, args=(case, r), name=f"{case['name']}-rank{r}")
             for r in range(case["world"])]
    for p in procs:
        p.start()
    deadline = time.monotonic() + case["timeout"]
    timed_out = False
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            timed_out = True
            break
    if timed_out:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join()
    cache = case.get("cache_dir")
    ended = {"exitcodes": [p.exitcode for p in procs], "timed_out": timed_out,
             "cache": sorted(os.path.basename(p) for p in glob.glob(f"{cache}/pass-*")) if cache else None}
    with open(os.path.join(case["out"], "ended.json"), "w") as f:
        json.dump(ended, f)


def main(launch_path: str) -> None:
    with open(launch_path) as f:
        launch = json.load(f)
    # Imported here once, every rank forked below has them: torch, flowdata, the flow, and
    # what building a loader imports on first use (its modules, pyarrow and pandas for the
    # index). Nothing is run here: the ranks start with no other state than imports.
    for module in ("torch.distributed", "pyarrow", "pandas", "flowdata", "flowdata.loader.build",
                   "tests.ranks_cases.flow"):
        importlib.import_module(module)

    for case in launch["cases"]:
        started = time.monotonic()
        run_case(case)
        print(f"case {case['name']}: {time.monotonic() - started:.2f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
