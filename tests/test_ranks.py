"""Ranks of ``torch.distributed`` sharing the statistics pass, with real process groups.

Every test starts 2 or 3 ranks as separate processes (``tests/ranks_cases/rank_main.py``)
in a gloo process group on 127.0.0.1, at 0 and 2 DataLoader workers, and compares what
each rank wrote with the others and with one process computing alone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import flowdata as fd
from tests.ranks_cases import flow
from tests.ranks_cases.rank_main import exact

ROOT = Path(__file__).resolve().parent.parent
N = 300  # 5 blocks of 64: 3 + 2 over two ranks, 2 + 2 + 1 over three


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(tmp: Path, world: int, workers: int = 0, *, n: int = N, outputs: tuple[str, ...] = ("normalized", "ident"),
              env: dict[str, str] | None = None, timeout: float = 240, **config: Any) -> list[dict[str, Any]]:
    """Starts ``world`` ranks and returns what each wrote, in rank order."""
    out = tmp / f"run-{world}-{workers}-{len(list(tmp.iterdir()))}"
    out.mkdir()
    cfg = {"out": str(out), "port": _port(), "world": world, "workers": workers, "n": n, "outputs": list(outputs),
           "env": env or {}, **config}
    path = out / "config.json"
    path.write_text(json.dumps(cfg))
    procs = [subprocess.Popen([sys.executable, "-m", "tests.ranks_cases.rank_main", str(path), str(r)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(world)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=timeout)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("a rank did not finish: " + "\n".join(logs)) from None
    results = []
    for r, (p, text) in enumerate(zip(procs, logs)):
        file = out / f"rank{r}.json"
        assert file.exists(), f"rank {r} wrote nothing (exit {p.returncode}):\n{text[-3000:]}"
        results.append(json.loads(file.read_text()))
    return results


def alone(outputs: tuple[str, ...] = ("normalized", "ident"), n: int = N, **kwargs: Any) -> Any:
    """The loader one process builds alone."""
    dr = fd.Builder().with_modules(flow).build()
    return dr.dataloader(list(outputs), inputs={"n": n}, batch_size=8, **kwargs)


def _ok(results: list[dict[str, Any]]) -> None:
    for r in results:
        assert "error" not in r, f"rank {r['rank']}: {r['error']['traceback']}"


@pytest.mark.parametrize("world,workers", [(2, 0), (2, 2), (3, 0), (3, 2)])
def test_ranks_share_the_pass_and_agree_bitwise(tmp_path: Path, world: int, workers: int) -> None:
    results = run_ranks(tmp_path, world, workers)
    _ok(results)
    single = alone().stats["stats"]
    want = {k: exact(getattr(single, k)) for k in ("mean", "std", "min", "max", "count")}
    for r in results:
        assert r["stats"] == want, f"rank {r['rank']}"
    # Pass 1: each sample computed by exactly one rank, whole blocks, shares within one block.
    computed = [r["pass1"] for r in results]
    assert sorted(i for c in computed for i in c) == list(range(N))
    assert all(len(c) == len(set(c)) for c in computed)
    blocks = [len(c) // 64 + (1 if len(c) % 64 else 0) for c in computed]
    assert max(blocks) - min(blocks) <= 1 and sum(blocks) == 5
    for c in computed:
        assert c == list(range(c[0], c[-1] + 1)) and c[0] % 64 == 0  # a run of whole blocks
    # The epoch: every sample exactly once across ranks.
    delivered = [i for r in results for i in r["delivered"]]
    assert sorted(delivered) == list(range(N))
