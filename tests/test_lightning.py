"""flowdata's loader under the real Lightning (issue 12, item 4): every epoch gets the
order set_epoch(epoch) gives, on one device and with DDP over two processes (gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flowdata as fd
from tests.lightning_cases import fit

SCRIPT = Path(fit.__file__)


def _run(devices: int, strategy: str, workers: int) -> dict[int, dict[int, list[int]]]:
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent.parent)}
    done = subprocess.run([sys.executable, str(SCRIPT), str(devices), strategy, str(workers)], capture_output=True,
                          text=True, timeout=180, env=env, cwd=SCRIPT.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            _, rank, seen = line.split(" ", 2)
            results[int(rank)] = {int(e): v for e, v in json.loads(seen).items()}
    return results


def _expected(epoch: int, rank: int = 0, world_size: int = 1) -> list[int]:
    dr = fd.Builder().with_modules(fit).build()
    loader = dr.dataloader(["item"], inputs={"n": 22}, batch_size=4, shuffle=True, seed=3, rank=rank,
                           world_size=world_size)
    loader.set_epoch(epoch)
    return [i for batch in loader for i in batch["item"].tolist()]


def test_every_epoch_of_a_lightning_fit_has_its_own_order() -> None:
    seen = _run(1, "auto", 0)[0]
    assert sorted(seen) == [0, 1, 2]
    for epoch, items in seen.items():
        assert items == _expected(epoch)  # what set_epoch(epoch) gives: Lightning drives it
    assert seen[0] != seen[1] != seen[2]


@pytest.mark.parametrize("workers", [0, 2, 2, 2])  # several runs with workers: none may hang
def test_lightning_ddp_keeps_flowdata_sampler_and_deals_each_sample_once(workers: int) -> None:
    ranks = _run(2, "ddp", workers)
    assert sorted(ranks) == [0, 1]
    for epoch in range(3):
        first, second = ranks[0][epoch], ranks[1][epoch]
        assert sorted(first + second) == list(range(22))  # each sample once across ranks
        assert first == _expected(epoch, 0, 2) and second == _expected(epoch, 1, 2)
    assert ranks[0][0] != ranks[0][1]


def test_a_loader_rebuilt_by_accelerate_says_so() -> None:
    from accelerate import Accelerator

    dr = fd.Builder().with_modules(fit).build()
    loader = dr.dataloader(["item", "x"], inputs={"n": 8}, batch_size=4)
    rebuilt = Accelerator(cpu=True).prepare(loader)
    batch = next(iter(rebuilt))
    with pytest.raises(fd.FlowdataError, match=r"asked for 'x' of an internal flowdata batch: the loader was rebuilt around its dataset by another library \(such as Accelerate's prepare\(\)\)(.|\n)*fix: iterate the flowdata.DataLoader itself"):
        batch["x"]
    assert [b["item"].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the loader itself works
