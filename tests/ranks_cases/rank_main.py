"""One rank of a ``torch.distributed`` test: ``python -m tests.ranks_cases.rank_main CONFIG.json RANK``.

Joins a gloo process group on 127.0.0.1, builds the loader of :mod:`tests.ranks_cases.flow`
and writes what the test checks to ``<out>/rank<R>.json``: the statistics (as exact hex
floats), the samples this rank computed in the statistics pass, the samples it delivered
in epoch 0, its report's skips, and the error it raised, if any.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
import traceback
from typing import Any


def exact(values: Any) -> list[str]:
    """Floats as hex: equal strings mean bitwise equal values."""
    import torch

    return [float(v).hex() for v in torch.as_tensor(values).double().flatten().tolist()]


def main(config_path: str, rank: int) -> None:
    with open(config_path) as f:
        config = json.load(f)
    out = config["out"]
    os.environ["RANK"] = str(rank)
    log = os.path.join(out, f"calls-rank{rank}")
    os.environ["FD_RANK_LOG"] = log
    for k, v in config.get("env", {}).items():
        os.environ[k] = v
    import torch.distributed as dist

    import flowdata as fd
    from tests.ranks_cases import flow

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{config['port']}", rank=rank,
                            world_size=config["world"])
    result: dict[str, Any] = {"rank": rank}
    started = time.monotonic()
    try:
        dr = fd.Builder().with_modules(flow).build()
        loader = dr.dataloader(config["outputs"], inputs={"n": config["n"]}, batch_size=8,
                               num_workers=config["workers"], on_error=config.get("on_error", "raise"),
                               cache_dir=config.get("cache_dir"), shuffle=True, seed=3,
                               streaming=config.get("streaming", False))
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
        for batch in loader:
            delivered.extend(int(i) for i in batch["ident"])
        result["delivered"] = delivered
        result["skipped"] = sorted({s.index for s in loader.report.skipped})
    except BaseException as exc:
        result["error"] = {"type": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - started,
                           "traceback": traceback.format_exc()}
        result["pass1"] = sorted(int(line) for p in glob.glob(f"{log}-*.log") for line in open(p))
    finally:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
