"""Ranks of ``torch.distributed`` sharing the statistics pass, with real process groups.

Every case runs 2 or 3 ranks as separate processes (``tests/ranks_cases/rank_main.py``)
in a gloo process group on 127.0.0.1, at 0 and 2 DataLoader workers, and each test
compares what each rank wrote with the others and with one process computing alone.

Importing torch in a rank costs more than most cases, so the cases are declared here with
:func:`_case` and run once for the module (the ``launched`` fixture) by one launcher that
imports torch once and forks each case's ranks afresh: every case still has processes
and a process group of its own. Each test checks its case(s) as it did when it started
its own ranks, and a failure names the case.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import flowdata as fd
from tests.ranks_cases import flow
from tests.ranks_cases.rank_main import exact

pytestmark = pytest.mark.dist  # ranks as processes in a gloo group

ROOT = Path(__file__).resolve().parents[3]
N = 300  # 5 blocks of 64: 3 + 2 over two ranks, 2 + 2 + 1 over three
CASE_TIMEOUT = 240.0  # seconds for one case's ranks (they take about 1 s; the launcher kills them past it)

# name -> the case's config; run in this order (the pass cache's reading after its writing).
_CASES: dict[str, dict[str, Any]] = {}


def _case(name: str, world: int, workers: int = 0, *, n: int = N, outputs: tuple[str, ...] = ("normalized", "ident"),
          env: dict[str, str] | None = None, **config: Any) -> str:
    """Declares a case: ``world`` ranks building the loader of ``outputs`` with these options."""
    assert name not in _CASES, name
    _CASES[name] = {"name": name, "world": world, "workers": workers, "n": n, "outputs": list(outputs),
                    "env": env or {}, "timeout": CASE_TIMEOUT, **config}
    return name


class Launched:
    """What the launch left: each case's folder (see tests/ranks_cases/rank_main.py)."""

    def __init__(self, root: Path, log: Path):
        self.root = root
        self.log = log

    def ended(self, name: str) -> dict[str, Any]:
        """How the ranks of case ``name`` ended: exit codes, timed out, the cache's files then."""
        file = self.root / name / "ended.json"
        if not file.exists():
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise AssertionError(f"case {name!r} did not run to its end; the launcher's output:\n{text[-3000:]}")
        ended: dict[str, Any] = json.loads(file.read_text())
        return ended

    def results(self, name: str) -> list[dict[str, Any]]:
        """What each rank of case ``name`` wrote, in rank order."""
        ended = self.ended(name)
        results = []
        for r in range(_CASES[name]["world"]):
            file = self.root / name / f"rank{r}.json"
            if not file.exists():
                log = self.root / name / f"rank{r}.log"
                text = log.read_text(errors="replace") if log.exists() else ""
                why = (f"killed after {_CASES[name]['timeout']:.0f} s" if ended["timed_out"]
                       else f"exit {ended['exitcodes'][r]}")
                raise AssertionError(f"case {name!r}: rank {r} wrote nothing ({why}):\n{text[-3000:]}")
            results.append(json.loads(file.read_text()))
        return results


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    """Every case of this module, run once, in order, by one launcher (each in fresh ranks)."""
    root = tmp_path_factory.mktemp("ranks")
    cases = [{**{k: v.format(root=root) if isinstance(v, str) else v for k, v in case.items()}, "out": str(root / name)}
             for name, case in _CASES.items()]
    path = root / "launch.json"
    path.write_text(json.dumps({"cases": cases}))
    log = root / "launcher.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "tests.ranks_cases.rank_main", str(path)], cwd=ROOT,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        launcher.wait(timeout=CASE_TIMEOUT * len(cases) + 60)  # each case is bounded by the launcher
    except subprocess.TimeoutExpired:
        pass
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)  # the launcher and every rank it forked
            launcher.wait()
    return Launched(root, log)


def alone(outputs: tuple[str, ...] = ("normalized", "ident"), n: int = N, **kwargs: Any) -> Any:
    """The loader one process builds alone."""
    dr = fd.Builder().with_modules(flow).build()
    return dr.dataloader(list(outputs), inputs={"n": n}, batch_size=8, **kwargs)


def _ok(results: list[dict[str, Any]]) -> None:
    for r in results:
        assert "error" not in r, f"rank {r['rank']}: {r['error']['traceback']}"


SHARE = {(world, workers): _case(f"share-{world}-{workers}", world, workers)
         for world, workers in [(2, 0), (2, 2), (3, 0), (3, 2)]}


@pytest.mark.parametrize("world,workers", [(2, 0), (2, 2), (3, 0), (3, 2)])
def test_ranks_share_the_pass_and_agree_bitwise(launched: Launched, world: int, workers: int) -> None:
    results = launched.results(SHARE[world, workers])
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


FAILING_ON_ONE_RANK = _case("skip-on-one-rank", 2, on_error="skip", env={"FD_FAIL": "1:250"})


def test_a_sample_failing_on_one_rank_is_left_out_on_every_rank(launched: Launched) -> None:
    # Once failed: under on_error="skip", a transient error on one rank only used
    # to give the ranks different statistics and different sample lists (samples delivered
    # twice, others never). Sample 250 is rank 1's in pass 1 (blocks 3 and 4).
    results = launched.results(FAILING_ON_ONE_RANK)
    _ok(results)
    os.environ["FD_FAIL"] = "*:250"
    try:
        want = _stats_of(alone(on_error="skip"))
    finally:
        del os.environ["FD_FAIL"]
    assert [r["stats"] for r in results] == [want, want]
    assert [r["skipped"] for r in results] == [[250], [250]]  # every rank knows it
    delivered = [i for r in results for i in r["real"]]  # 299 samples: one rank's last row repeats one
    assert sorted(delivered) == [i for i in range(N) if i != 250]
    assert sum(r["padded"] for r in results) == 1


STOPS = {(world, workers): _case(f"stops-{world}-{workers}", world, workers,
                                 env={"FD_FAIL": "1:200", "FD_SLOW": "0.02"})
         for world, workers in [(3, 0), (2, 2)]}


@pytest.mark.parametrize("world,workers", [(3, 0), (2, 2)])
def test_a_failure_on_one_rank_stops_every_rank(launched: Launched, world: int, workers: int) -> None:
    # Rank 1 fails on its 9th sample; rank 0 (192 samples of 20 ms) stops long before its end.
    results = launched.results(STOPS[world, workers])
    errors = [r.get("error") for r in results]
    assert errors[1] is not None and errors[1]["type"] == "SampleError"
    assert "node 'feature'" in errors[1]["message"] and "sample 200" in errors[1]["message"]
    for r in (0, *range(2, world)):
        err = errors[r]
        assert err is not None and err["type"] == "RankError", results[r]
        assert f"rank 1 of {world} failed in pass 1 of group 'item'" in err["message"]
        assert "transient read error on sample 200" in err["message"]
    assert len(results[0]["pass1"]) < 150


UNEVEN = {(n, world, fail): _case(f"uneven-{ident}", world, n=n, outputs=("normalized", "ident", "word_id"),
                                  on_error="skip", env={"FD_FAIL": fail})
          for (n, world, fail), ident in [((70, 3, ""), "empty-rank"), ((130, 2, "*:128,*:129"), "all-skipped")]}


@pytest.mark.parametrize("n,world,fail", [(70, 3, ""), (130, 2, "*:128,*:129")], ids=["empty-rank", "all-skipped"])
def test_uneven_and_empty_shares_give_the_same_statistics(launched: Launched, n: int, world: int, fail: str) -> None:
    # 70 samples are 2 blocks: rank 2 of 3 computes nothing. 130 samples over 2 ranks: rank 1
    # has samples 128 and 129, and both fail.
    outputs = ("normalized", "ident", "word_id")
    results = launched.results(UNEVEN[n, world, fail])
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
    # Evened out (the default): the same batches on every rank, the padding rows aside.
    assert sorted(i for r in results for i in r["real"]) == [i for i in range(n) if i not in skipped]
    assert len({tuple(r["sizes"]) for r in results}) == 1


PLAIN_COLLECT = _case("plain-collect", 2, outputs=("scaled", "ident"))


def test_a_plain_collect_is_computed_whole_by_every_rank(launched: Launched) -> None:
    results = launched.results(PLAIN_COLLECT)
    _ok(results)
    want = float(alone(("scaled", "ident")).stats["largest"]).hex()
    assert [r["largest"] for r in results] == [want, want]
    assert [r["pass1"] for r in results] == [list(range(N))] * 2
    assert sorted(i for r in results for i in r["delivered"]) == list(range(N))


SKIP_DIFFERENT = _case("skip-different", 2, outputs=("scaled", "ident"), on_error="skip", env={"FD_FAIL": "1:7"})


def test_ranks_that_skip_different_samples_of_a_whole_pass_raise_alike(launched: Launched) -> None:
    results = launched.results(SKIP_DIFFERENT)
    for r in results:
        assert r["error"]["type"] == "FlowdataError"
        assert "the 2 ranks skipped different samples in pass 1 of group 'item'" in r["error"]["message"]
        assert "sample 7: skipped on rank(s) 1 only" in r["error"]["message"]


# Written by the ranks of one case, read by those of another: other processes, as another job's.
CACHE_WRITE = _case("cache-write", 2, cache_dir="{root}/cache")
CACHE_READ = _case("cache-read", 2, cache_dir="{root}/cache")


def test_the_pass_cache_is_written_once_and_read_by_every_rank(launched: Launched) -> None:
    first = launched.results(CACHE_WRITE)
    _ok(first)
    written = launched.ended(CACHE_WRITE)["cache"]  # as the writing ranks left it
    assert len(written) == 1, written
    again = launched.results(CACHE_READ)
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


STREAMED = _case("streamed", 2, 2, streaming=True)


def test_a_streamed_source_is_computed_whole_by_every_rank(launched: Launched) -> None:
    results = launched.results(STREAMED)
    _ok(results)
    want = _stats_of(alone())
    assert [r["stats"] for r in results] == [want, want]
    assert [r["pass1"] for r in results] == [list(range(N))] * 2
    assert sorted(i for r in results for i in r["delivered"]) == list(range(N))


EVEN = {(world, workers, even): _case(f"even-{world}-{workers}-{even}", world, workers, n=2 * 2 * 8 + 1,
                                     even_batches=even)
        for world, workers, even in [(2, 0, True), (2, 2, True), (3, 2, True), (2, 2, False)]}


@pytest.mark.parametrize("world,workers,even", [(2, 0, True), (2, 2, True), (3, 2, True), (2, 2, False)])
def test_ranks_get_the_same_batches_padded_and_marked_unless_even_batches_is_off(
        launched: Launched, world: int, workers: int, even: bool) -> None:
    # Once failed: N = 2*k*batch_size + 1 samples gave rank 0 one batch more than
    # rank 1 (a DDP step paired with the other rank's next epoch, then a crash). Now every
    # rank has the same number of batches of the same sizes; the rows that repeat a sample
    # are counted (report.padded) and marked (loader.padding(b)); even_batches=False keeps
    # the exactly-once uneven split.
    n = 2 * 2 * 8 + 1
    results = launched.results(EVEN[world, workers, even])
    _ok(results)
    assert sorted(i for r in results for i in r["real"]) == list(range(n))  # each sample once, padding aside
    if even:
        assert len({tuple(r["sizes"]) for r in results}) == 1, [r["sizes"] for r in results]
        assert sum(r["padded"] for r in results) == -(-n // world) * world - n
        assert sum(len(r["delivered"]) for r in results) == -(-n // world) * world
    else:
        assert [len(r["sizes"]) for r in results] == [3, 2]  # uneven, as asked
        assert [r["padded"] for r in results] == [0, 0] and all(r["real"] == r["delivered"] for r in results)


MORE_ITEMS = _case("more-items-on-one-rank", 2, n=256, env={"FD_EXTRA": "1:1"})


def test_ranks_whose_sources_list_different_items_raise_alike(launched: Launched) -> None:
    # Once failed: a file appeared between two ranks' listings (256 items on rank
    # 0, 257 on rank 1); the epoch silently lost and repeated samples. One fingerprint is
    # exchanged when the loader is built, and every rank raises saying how they differ.
    results = launched.results(MORE_ITEMS)
    for r in results:
        err = r.get("error")
        assert err is not None and err["type"] == "RankError", r
        assert re.search(r"rank 1 of 2 failed in indexing source 'item', which the ranks share: the ranks' sources "
                         r"list different items: rank 0 indexes 256 items, rank 1 257; the first that differs is item "
                         r"256: rank 0 has none, rank 1 has 256(.|\n)*fix: give every rank the same items",
                         err["message"]), err["message"]
    assert [r["pass1"] for r in results] == [[], []]  # raised before the statistics pass


KILLED = {workers: _case(f"killed-{workers}", 3, workers, env={"FD_KILL": "2:270", "FD_SLOW": "0.01"})
          for workers in (0, 2)}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_killed_rank_gives_rank_error_on_every_survivor(launched: Launched, workers: int) -> None:
    # Once failed: rank 2 of 3 SIGKILLed during the shared statistics pass (no
    # torchrun agent to stop the others). The survivors raised gloo's bare RuntimeError from
    # the status exchange, and one aborted at exit.
    name = KILLED[workers]
    ended = launched.ended(name)
    assert not ended["timed_out"]
    assert ended["exitcodes"] == [0, 0, -signal.SIGKILL]  # the survivors exit normally
    for r in range(2):
        err = json.loads((launched.root / name / f"rank{r}.json").read_text()).get("error")
        assert err is not None and err["type"] == "RankError", err
        assert re.search(r"rank 2 of 3 failed in pass 1 of group 'item', which the ranks share: no word from rank "
                         r"2: (.|\n)*fix: rank 2 stopped without reporting an error", err["message"]), err["message"]
