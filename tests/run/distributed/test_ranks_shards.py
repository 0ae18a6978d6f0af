"""Streams in shards evened out between real ranks (``even_batches``, the default).

Every case runs 2 ranks as separate processes (``tests/ranks_cases/shards_main.py``) in a
gloo process group on 127.0.0.1, over 3 shards of different lengths (13, 5 and 22 rows):
flowdata's own sharded iterable and a Hugging Face ``IterableDataset`` of local Parquet
files, at 0 and 2 DataLoader workers. Split between the ranks, the shards give rank 0
35 rows and rank 1 5 (at 0 workers): 9 batches of 4 against 2. Evened, both ranks take
the same number of steps with the same batch sizes, the rows that repeat a sample are
marked (``loader.padding(b)``, ``report.padded``), and every real row comes exactly once
across the ranks; ``even_batches=False`` keeps the uneven split.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.dist  # ranks as processes in a gloo group

ROOT = Path(__file__).resolve().parents[3]
PARTS = [list(range(0, 13)), list(range(100, 105)), list(range(200, 222))]
ALL = sorted(i for p in PARTS for i in p)
CASE_TIMEOUT = 240.0  # seconds for one case's ranks (a few s; a hang is told apart by this)

_CASES: dict[str, dict[str, Any]] = {}


def _case(name: str, stream: str = "own", workers: int = 0, *, parts: list[list[int]] = PARTS,
          **config: Any) -> str:
    _CASES[name] = {"name": name, "world": 2, "workers": workers, "stream": stream, "parts": parts,
                    "timeout": CASE_TIMEOUT, **config}
    return name


OWN = {w: _case(f"own-{w}", "own", w) for w in (0, 2)}
HF = {w: _case(f"hf-{w}", "hf", w) for w in (0, 2)}
UNEVEN = _case("uneven", "own", 0, even_batches=False)
RESUME = _case("resume", "own", 0, resume_at=5)
LAST_ONLY = _case("last-only", "own", 0, parts=[list(range(8)), list(range(100, 106))])
FIRST_SHORT = _case("first-short", "own", 0, parts=[list(range(6)), list(range(100, 108))])
FAIL = _case("fail", "own", 0, env={"FD_FAIL": "1:103"})


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every case, run once, in order, by one launcher (each case in fresh ranks)."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("shards")
    files = []
    for k, part in enumerate(PARTS):
        path = root / f"part-{k}.parquet"
        pq.write_table(pa.table({"x": part}), path)
        files.append(str(path))
    cases = [{**case, "files": files, "out": str(root / name)} for name, case in _CASES.items()]
    (root / "launch.json").write_text(json.dumps({"cases": cases}))
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(root / "hf-cache")}
    with open(root / "launcher.log", "wb") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "tests.ranks_cases.shards_main", str(root / "launch.json")],
                                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        launcher.wait(timeout=CASE_TIMEOUT * len(cases) + 60)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    return root


def _results(root: Path, name: str, *, ok: bool = True) -> list[dict[str, Any]]:
    ended_file = root / name / "ended.json"
    assert ended_file.exists(), (root / "launcher.log").read_text(errors="replace")[-3000:]
    ended = json.loads(ended_file.read_text())
    assert not ended["timed_out"], f"case {name!r}: the ranks hung (killed after {CASE_TIMEOUT:.0f} s)"
    results = []
    for r in range(2):
        file = root / name / f"rank{r}.json"
        assert file.exists(), (root / name / f"rank{r}.log").read_text(errors="replace")[-3000:]
        result = json.loads(file.read_text())
        if ok:
            assert "error" not in result, f"case {name!r}, rank {r}: {result['error']['traceback']}"
        results.append(result)
    return results


def _real(epoch: dict[str, Any]) -> list[int]:
    return [i for ids, pad in zip(epoch["batches"], epoch["padding"], strict=True) for i in ids[: len(ids) - pad]]


def _check_evened(results: list[dict[str, Any]]) -> None:
    sizes = [[len(b) for b in r["epoch"]["batches"]] for r in results]
    assert sizes[0] == sizes[1], f"the ranks' batch sizes differ: {sizes}"
    assert sorted(i for r in results for i in _real(r["epoch"])) == ALL  # every real row exactly once
    for r in results:
        epoch = r["epoch"]
        assert r["padded"] == sum(epoch["padding"])
        assert epoch["names_ok"]  # strings and tensors padded alike, row by row
        for ids in epoch["batches"]:
            assert set(ids) <= set(ALL)  # padding repeats real rows
    assert sum(r["padded"] for r in results) == sum(sizes[0]) * 2 - len(ALL)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_in_shards_is_evened_between_ranks(launched: Path, workers: int) -> None:
    results = _results(launched, OWN[workers])
    _check_evened(results)
    if workers == 0:  # rank 0's lane: 35 rows, rank 1's: 5 rows; rank 1 pads 7 whole batches and 3 rows
        assert [len(b) for b in results[0]["epoch"]["batches"]] == [4] * 8 + [3]
        assert results[1]["epoch"]["padding"] == [0, 3] + [4] * 6 + [3]
        assert results[1]["padded"] == 30
    assert [r["remainder"] for r in results] == [-1, -1]  # padded before the last step: Accelerate is told -1


@pytest.mark.parametrize("workers", [0, 2])
def test_hf_iterable_dataset_of_parquet_shards_is_evened_between_ranks(launched: Path, workers: int) -> None:
    _check_evened(_results(launched, HF[workers]))


def test_even_batches_false_keeps_the_uneven_split_of_a_stream_in_shards(launched: Path) -> None:
    results = _results(launched, UNEVEN)
    assert [len(r["epoch"]["batches"]) for r in results] == [9, 2]
    assert [r["padded"] for r in results] == [0, 0]
    assert sorted(i for r in results for b in r["epoch"]["batches"] for i in b) == ALL


def test_accelerate_remainder_of_an_evened_stream_is_exact_when_only_the_last_step_pads(launched: Path) -> None:
    # 8 rows and 6: the last step is 4 real rows on rank 0, 2 real and 2 padding on rank 1.
    results = _results(launched, LAST_ONLY)
    assert [[len(b) for b in r["epoch"]["batches"]] for r in results] == [[4, 4], [4, 4]]
    assert results[1]["epoch"]["padding"] == [0, 2]
    assert [r["remainder"] for r in results] == [6, 6]  # gather_for_metrics keeps the first 6 of the last 8
    # 6 rows and 8: rank 0's padding lies between real rows of the gathered last step: -1.
    results = _results(launched, FIRST_SHORT)
    assert results[0]["epoch"]["padding"] == [0, 2]
    assert [r["remainder"] for r in results] == [-1, -1]


def test_resumed_evened_stream_in_shards_delivers_exactly_the_rest(launched: Path) -> None:
    results = _results(launched, RESUME)
    for r in results:
        assert len(r["before"]["batches"]) == 5
        assert len(r["before"]["batches"]) + len(r["after"]["batches"]) == len(r["epoch"]["batches"])
        # The same steps, sizes, padding and real rows as the uninterrupted epoch (after a resume,
        # a rank with nothing left to repeat repeats the rows another rank gives it).
        assert r["before"]["padding"] + r["after"]["padding"] == r["epoch"]["padding"]
        resumed = [len(b) for b in r["before"]["batches"] + r["after"]["batches"]]
        assert resumed == [len(b) for b in r["epoch"]["batches"]]
        assert _real(r["before"]) + _real(r["after"]) == _real(r["epoch"])
    assert results[1]["state"]["padding_batches"] == 3  # rank 1 had served its 2 batches, then 3 padding
    assert sorted(i for r in results for part in ("before", "after") for i in _real(r[part])) == ALL


def test_a_rank_failing_while_evening_a_stream_stops_the_other_with_a_rank_error(launched: Path) -> None:
    results = _results(launched, FAIL, ok=False)
    assert results[1]["error"]["type"] == "SampleError"
    assert "transient read error on row 103" in results[1]["error"]["message"]
    assert results[0]["error"]["type"] == "RankError"
    assert "rank 1 of 2 failed in evening out the ranks' batches of source 'row'" in results[0]["error"]["message"]
