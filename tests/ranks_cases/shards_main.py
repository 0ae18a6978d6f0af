"""The ranks of the evened-stream tests: ``python -m tests.ranks_cases.shards_main LAUNCH.json``.

As :mod:`tests.ranks_cases.rank_main`: torch and flowdata are imported once, then every case
runs in fresh processes forked from here, one per rank, in a gloo process group of its own
on 127.0.0.1. Each rank builds a loader of :mod:`tests.ranks_cases.shards_flow` over the
case's stream (``"own"``: flowdata's sharded iterable of the case's ``parts``; ``"hf"``: a
``datasets.IterableDataset`` of one Parquet file per part, written by the test) and writes
``<out>/rank<R>.json``: per batch its ids, its size and ``loader.padding(b)``, the report's
padded rows, ``loader.remainder`` after the epoch, a ``state_dict()`` and what a resumed
loader delivered (``resume_at``), and the error it raised, if any.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
import traceback
from typing import Any

from tests.ranks_cases.rank_main import _port


def _stream(case: dict[str, Any]) -> Any:
    from tests.ranks_cases.shards_flow import Shards

    if case["stream"] == "own":
        return Shards(case["parts"])
    import datasets

    return datasets.load_dataset("parquet", data_files=case["files"], split="train", streaming=True)


def _epoch(loader: Any, stop: int | None = None, start: int = 0) -> dict[str, Any]:
    """Batch ``b`` of the iteration is the epoch's batch ``start + b`` (a resumed loader)."""
    batches: list[list[int]] = []
    padding: list[int] = []
    names_ok = True
    for b, batch in enumerate(loader):
        ids = [int(i) for i in batch["ident"]]
        batches.append(ids)
        padding.append(loader.padding(start + b))
        names_ok = names_ok and [f"r{i}" for i in ids] == list(batch["name"]) and [
            float(i) for i in ids] == batch["value"][:, 0].tolist()
        if stop is not None and b + 1 == stop:
            break
    return {"batches": batches, "padding": padding, "names_ok": names_ok}


def rank_main(case: dict[str, Any], rank: int) -> None:
    out = case["out"]
    with open(os.path.join(out, f"rank{rank}.log"), "ab", buffering=0) as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    os.environ["RANK"] = str(rank)
    for k, v in case.get("env", {}).items():
        os.environ[k] = v
    import torch.distributed as dist

    import flowdata as fd
    from tests.ranks_cases import shards_flow

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{case['port']}", rank=rank,
                            world_size=case["world"])
    result: dict[str, Any] = {"rank": rank}
    try:
        dr = fd.Builder().with_modules(shards_flow).build()

        def loader() -> Any:
            return dr.dataloader(["ident", "value", "name"], inputs={"data": _stream(case)},
                                 batch_size=case.get("batch_size", 4), num_workers=case["workers"],
                                 even_batches=case.get("even_batches", True), shuffle=case.get("shuffle", False),
                                 seed=3)

        first = loader()
        result["epoch"] = _epoch(first)
        result["padded"] = first.report.padded
        result["remainder"] = first.remainder
        if case.get("resume_at") is not None:
            part = loader()
            result["before"] = _epoch(part, case["resume_at"])
            state = part.state_dict()
            result["state"] = state
            again = loader()
            again.load_state_dict(json.loads(json.dumps(state)))
            result["after"] = _epoch(again, start=case["resume_at"])
    except BaseException as exc:
        result["error"] = {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
    finally:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.destroy_process_group()


def run_case(case: dict[str, Any]) -> None:
    """Forks the ranks of ``case`` and waits for them (killed past the case's ``timeout``)."""
    os.makedirs(case["out"], exist_ok=True)
    case = {**case, "port": _port()}
    fork = multiprocessing.get_context("fork")
    procs = [fork.Process(target=rank_main, args=(case, r)) for r in range(case["world"])]
    for p in procs:
        p.start()
    deadline = time.monotonic() + case["timeout"]
    timed_out = False
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        timed_out = timed_out or p.is_alive()
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join()
    with open(os.path.join(case["out"], "ended.json"), "w") as f:
        json.dump({"exitcodes": [p.exitcode for p in procs], "timed_out": timed_out}, f)


def main(launch_path: str) -> None:
    with open(launch_path) as f:
        launch = json.load(f)
    import importlib

    for module in ("torch.distributed", "pyarrow", "datasets", "flowdata", "flowdata.loader.build",
                   "tests.ranks_cases.shards_flow"):
        importlib.import_module(module)
    for case in launch["cases"]:
        started = time.monotonic()
        run_case(case)
        print(f"case {case['name']}: {time.monotonic() - started:.2f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
