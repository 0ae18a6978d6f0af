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


def _stats_of(loader: Any) -> dict[str, list[str]]:
    s = loader.stats["stats"]
    return {k: exact(getattr(s, k)) for k in ("mean", "std", "min", "max", "count")}


def test_a_sample_failing_on_one_rank_is_left_out_on_every_rank(tmp_path: Path) -> None:
    # The reproducer: under on_error="skip", a transient error on one rank only used
    # to give the ranks different statistics and different sample lists (samples delivered
    # twice, others never). Sample 250 is rank 1's in pass 1 (blocks 3 and 4).
    results = run_ranks(tmp_path, 2, on_error="skip", env={"FD_FAIL": "1:250"})
    _ok(results)
    os.environ["FD_FAIL"] = "*:250"
    try:
        want = _stats_of(alone(on_error="skip"))
    finally:
        del os.environ["FD_FAIL"]
    assert [r["stats"] for r in results] == [want, want]
    assert [r["skipped"] for r in results] == [[250], [250]]  # every rank knows it
    delivered = [i for r in results for i in r["delivered"]]
    assert sorted(delivered) == [i for i in range(N) if i != 250]


@pytest.mark.parametrize("world,workers", [(3, 0), (2, 2)])
def test_a_failure_on_one_rank_stops_every_rank(tmp_path: Path, world: int, workers: int) -> None:
    # Rank 1 fails on its 9th sample; rank 0 (192 samples of 20 ms) stops long before its end.
    results = run_ranks(tmp_path, world, workers, env={"FD_FAIL": "1:200", "FD_SLOW": "0.02"})
    errors = [r.get("error") for r in results]
    assert errors[1] is not None and errors[1]["type"] == "SampleError"
    assert "node 'feature'" in errors[1]["message"] and "sample 200" in errors[1]["message"]
    for r in (0, *range(2, world)):
        err = errors[r]
        assert err is not None and err["type"] == "RankError", results[r]
        assert f"rank 1 of {world} failed in pass 1 of group 'item'" in err["message"]
        assert "transient read error on sample 200" in err["message"]
    assert len(results[0]["pass1"]) < 150


@pytest.mark.parametrize("n,world,fail", [(70, 3, ""), (130, 2, "*:128,*:129")], ids=["empty-rank", "all-skipped"])
def test_uneven_and_empty_shares_give_the_same_statistics(tmp_path: Path, n: int, world: int, fail: str) -> None:
    # 70 samples are 2 blocks: rank 2 of 3 computes nothing. 130 samples over 2 ranks: rank 1
    # has samples 128 and 129, and both fail.
    outputs = ("normalized", "ident", "word_id")
    results = run_ranks(tmp_path, world, n=n, outputs=outputs, on_error="skip", env={"FD_FAIL": fail})
    _ok(results)
    os.environ["FD_FAIL"] = fail
    try:
        single = alone(outputs, n=n, on_error="skip")
    finally:
        del os.environ["FD_FAIL"]
    want = _stats_of(single)
    vocab = [list(single.stats["words"].tokens), list(single.stats["words"].counts)]
    for r in results:
        assert r["stats"] == want and r["words"] == vocab
    if world == 3:
        assert results[2]["pass1"] == []
    skipped = {128, 129} if fail else set()
    assert sorted(i for r in results for i in r["delivered"]) == [i for i in range(n) if i not in skipped]


def test_a_plain_collect_is_computed_whole_by_every_rank(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, 2, outputs=("scaled", "ident"))
    _ok(results)
    want = float(alone(("scaled", "ident")).stats["largest"]).hex()
    assert [r["largest"] for r in results] == [want, want]
    assert [r["pass1"] for r in results] == [list(range(N))] * 2
    assert sorted(i for r in results for i in r["delivered"]) == list(range(N))


def test_ranks_that_skip_different_samples_of_a_whole_pass_raise_alike(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, 2, outputs=("scaled", "ident"), on_error="skip", env={"FD_FAIL": "1:7"})
    for r in results:
        assert r["error"]["type"] == "FlowdataError"
        assert "the 2 ranks skipped different samples in pass 1 of group 'item'" in r["error"]["message"]
        assert "sample 7: skipped on rank(s) 1 only" in r["error"]["message"]


def test_the_pass_cache_is_written_once_and_read_by_every_rank(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = run_ranks(tmp_path, 2, cache_dir=str(cache))
    _ok(first)
    assert len(list(cache.glob("pass-*"))) == 1
    again = run_ranks(tmp_path, 2, cache_dir=str(cache))
    _ok(again)
    assert [r["pass1"] for r in again] == [[], []]  # every rank read it; nobody computed
    assert [r["stats"] for r in again] == [r["stats"] for r in first]


def test_block_states_past_the_budget_wait_on_disk_and_merge_bitwise_alike() -> None:
    # A rank after the first keeps its blocks' reducers until the running total reaches it;
    # past the budget they wait on disk as their state_dict, restored bit for bit.
    import glob

    import numpy as np
    import torch

    from flowdata.run.folding import KeptBlocks
    from flowdata.stats import Welford

    blocks = []
    for b in range(6):
        w = Welford(dim=0)
        w.update(torch.from_numpy(np.random.default_rng(b).normal(b, 1 + b, size=(64, 5))))
        blocks.append(w)
    one = sum(a.nbytes for a in blocks[0].state_dict().values())
    kept = KeptBlocks(budget=2 * one)
    for w in blocks:
        kept.append(w)
    assert len(kept) == 6 and len(glob.glob(f"{kept._folder}/*.state")) == 4
    in_memory, via_disk = Welford(dim=0), Welford(dim=0)
    for w in blocks:
        in_memory.merge(w)
    for w in kept:
        via_disk.merge(w)
    for name, value in in_memory.state_dict().items():
        assert np.array_equal(value, via_disk.state_dict()[name]) and value.tobytes() == via_disk.state_dict()[name].tobytes()
    assert glob.glob(f"{kept._folder}/*.state") == []  # each removed once read


def test_a_streamed_source_is_computed_whole_by_every_rank(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, 2, 2, streaming=True)
    _ok(results)
    want = _stats_of(alone())
    assert [r["stats"] for r in results] == [want, want]
    assert [r["pass1"] for r in results] == [list(range(N))] * 2
    assert sorted(i for r in results for i in r["delivered"]) == list(range(N))
