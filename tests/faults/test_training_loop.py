"""Fault injection in the training loop: each test is named after the fault it injects. A
crash at any checkpoint, a warm pass cache after a cold run that skipped samples, a
tampered position, a batch that cannot be collated, a node that calls sys.exit: every
sample is dealt once, and every failure says what happened.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flowdata as fd


LOADER = """
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Count

def item(n: int, bad: list[int]) -> Parallel[int]:
    yield from range(n)

def value(item: int, bad: list[int]) -> int:
    if item in bad:
        raise ValueError(f"bad sample {item}")
    return item

@reduce(Count)
def counted(value: Collect[int]) -> int: ...

def shifted(value: int, counted: int) -> int:
    return value + 1000 * counted
"""


def _train(loader: Any, epochs: int, crash_at: int | None, seen: list[tuple[int, int]]) -> Any:
    """The docs' training loop; saves a checkpoint after every step and after every epoch.
    Returns the checkpoint when it 'crashes' after ``crash_at`` checkpoints, else None."""
    saves = 0
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            seen.extend((epoch, int(v)) for v in batch["value"])
            state, saves = loader.state_dict(), saves + 1
            if saves == crash_at:
                return state
        state, saves = loader.state_dict(), saves + 1
        if saves == crash_at:
            return state
    return None


def test_a_crash_at_any_checkpoint_of_the_training_loop(build: Callable[..., fd.Driver]) -> None:
    dr = build(LOADER)
    args: dict[str, Any] = dict(inputs={"n": 20, "bad": []}, batch_size=6, shuffle=True, seed=3)
    epochs, per_epoch = 3, 4  # 20 samples in batches of 6
    for crash_at in range(1, epochs * (per_epoch + 1) + 1):
        seen: list[tuple[int, int]] = []
        state = _train(dr.dataloader(["value"], **args), epochs, crash_at, seen)
        resumed = dr.dataloader(["value"], **args)
        if state is not None:
            resumed.load_state_dict(state)
            _train(resumed, epochs, None, seen)
        assert sorted(seen) == [(e, i) for e in range(epochs) for i in range(20)], crash_at


def test_a_warm_pass_cache_deals_the_samples_a_cold_run_skipped(build: Callable[..., fd.Driver], tmp_path: Path) -> None:
    dr = build(LOADER)
    args: dict[str, Any] = dict(inputs={"n": 30, "bad": [3, 11, 17]}, batch_size=4, shuffle=True, seed=1,
                                on_error="skip", cache_dir=tmp_path)
    cold = dr.dataloader(["shifted"], **args)
    it = iter(cold)
    head = [next(it)["shifted"].tolist() for _ in range(2)]
    state = cold.state_dict()
    warm = dr.dataloader(["shifted"], **args)  # pass 1 comes from the cache
    assert warm.stats == cold.stats == {"counted": 27}
    assert sorted(s.index for s in warm.report.skipped) == [3, 11, 17]
    warm.load_state_dict(state)
    rest = [b["shifted"].tolist() for b in warm]
    full = [b["shifted"].tolist() for b in dr.dataloader(["shifted"], **args)]
    assert head + rest == full
    # Under on_error="raise", an entry stored by a run that skipped samples is not used.
    with pytest.raises(fd.SampleError, match=r"bad sample 3"):
        dr.dataloader(["shifted"], **{**args, "on_error": "raise"})


@pytest.mark.parametrize("tamper", [{"batches_served": -1}, {"batches_served": 10**6}, {"batches_served": "2"},
                                    {"epoch": -3}, {"epoch": True}, {"version": 7}])
def test_a_tampered_position(build: Callable[..., fd.Driver], tamper: dict[str, Any]) -> None:
    dr = build(LOADER)
    loader = dr.dataloader(["value"], inputs={"n": 20, "bad": []}, batch_size=6)
    state = {**loader.state_dict(), **tamper}
    with pytest.raises(fd.FlowdataError, match=r"cannot resume: the saved position is impossible"):
        dr.dataloader(["value"], inputs={"n": 20, "bad": []}, batch_size=6).load_state_dict(state)


COLLATE = """
import torch
from flowdata import Parallel

def item(n: int) -> Parallel[int]:
    yield from range(n)

def ragged(item: int) -> torch.Tensor:
    return torch.zeros(1 + item % 2)

def sometimes_none(item: int) -> int | None:
    return None if item == 5 else item

def stops(item: int) -> int:
    if item == 2:
        raise SystemExit(3)
    return item
"""


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_that_cannot_be_collated(build: Callable[..., fd.Driver], workers: int) -> None:
    dr = build(COLLATE)
    loader = dr.dataloader(["ragged"], inputs={"n": 8}, batch_size=4, num_workers=workers)
    with pytest.raises(fd.FlowdataError, match=r"output 'ragged' could not be collated into a batch of samples \[0, 1, 2, 3\] \(group 'item'\): RuntimeError: .*\n  fix: make every sample's value the same shape"):
        list(loader)
    loader = dr.dataloader(["sometimes_none"], inputs={"n": 8}, batch_size=4, num_workers=workers)
    with pytest.raises(fd.FlowdataError, match=r"output 'sometimes_none' could not be collated into a batch of samples \[4, 5, 6, 7\]"):
        list(loader)


def test_a_node_that_calls_sys_exit(build: Callable[..., fd.Driver]) -> None:
    dr = build(COLLATE)
    with pytest.raises(fd.SampleError, match=r"node 'stops' \(.*:14\) failed on sample 2 of group 'item'.*SystemExit: 3"):
        dr.run_sample(["stops"], index=2, inputs={"n": 4})
    loader = dr.dataloader(["stops"], inputs={"n": 4}, batch_size=4, on_error="skip")
    assert [v for b in loader for v in b["stops"].tolist()] == [0, 1, 3]
    assert [s.index for s in loader.report.skipped] == [2]
