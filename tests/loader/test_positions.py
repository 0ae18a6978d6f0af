"""The position of an epoch, per kind of loader dataset: map-style, plain stream, stream in
shards. Each saves itself as plain values and resumes with exactly the remaining batches;
states saved by earlier versions load; a refused state changes nothing."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

os.environ["HF_DATASETS_OFFLINE"] = "1"

import datasets
import pytest

import flowdata as fd
from flowdata.loader import EpochOrder

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

FLOW = """
from typing import Any
from flowdata import Parallel, Sequential

def item(n: int) -> Parallel[int]:
    return list(range(n))

def tick(n: int) -> Sequential[int]:
    yield from range(n)

def x(item: int) -> int:
    return item

def t(tick: int) -> int:
    return tick

def row(data: Any) -> Parallel[dict]:
    return data

def rx(row: dict) -> int:
    return int(row["x"])
"""


@pytest.fixture
def dr(make_module: Callable[[str], Any]) -> fd.Driver:
    return fd.Builder().with_modules(make_module(FLOW)).build()


def _shards() -> datasets.IterableDataset:
    return datasets.Dataset.from_dict({"x": list(range(30))}).to_iterable_dataset(num_shards=3)


# One loader of each kind (and under ranks given by hand): output, arguments, a cut.
KINDS: dict[str, tuple[str, Callable[[], dict[str, Any]], int]] = {
    "map": ("x", lambda: dict(inputs={"n": 23}, batch_size=4, shuffle=True, seed=3), 2),
    "map_ranks": ("x", lambda: dict(inputs={"n": 23}, batch_size=4, shuffle=True, seed=3, rank=1, world_size=2), 2),
    "stream": ("t", lambda: dict(inputs={"n": 23}, batch_size=4, shuffle=True, shuffle_buffer=5, seed=3), 2),
    "stream_ranks": ("x", lambda: dict(inputs={"n": 23}, batch_size=4, shuffle=True, shuffle_buffer=5, seed=3,
                                       streaming=True, rank=1, world_size=2), 2),
    "lanes": ("rx", lambda: dict(inputs={"data": _shards()}, batch_size=4, shuffle=True, shuffle_buffer=4, seed=3,
                                 num_workers=2), 3),
    "lanes_ranks": ("rx", lambda: dict(inputs={"data": _shards()}, batch_size=4, shuffle=True, shuffle_buffer=4,
                                       seed=3, rank=0, world_size=2), 2),
}

# The kinds whose loader starts DataLoader workers are marked `procs` (not in the fast tier).
KIND_PARAMS = [pytest.param(k, marks=[pytest.mark.procs] if KINDS[k][1]().get("num_workers") else [])
               for k in sorted(KINDS)]

# state_dict() of each loader of KINDS after its cut, as flowdata 0.x saved it before the
# datasets owned their positions (captured from that code, key order included).
SAVED: dict[str, dict[str, Any]] = {
    "map": {"version": 1, "epoch": 0, "batches_served": 2, "streaming": False, "seed": 3, "shuffle": True,
            "batch_size": 4, "num_samples": 23, "rank": 0, "world_size": 1, "drop_last": False},
    "map_ranks": {"version": 1, "epoch": 0, "batches_served": 2, "streaming": False, "seed": 3, "shuffle": True,
                  "batch_size": 4, "num_samples": 23, "rank": 1, "world_size": 2, "drop_last": False,
                  "even_batches": True},
    "stream": {"version": 1, "epoch": 0, "batches_served": 2, "shuffle_buffer": 5, "streaming": True, "seed": 3,
               "shuffle": True, "batch_size": 4, "rank": 0, "world_size": 1, "drop_last": False},
    "stream_ranks": {"version": 1, "epoch": 0, "batches_served": 2, "shuffle_buffer": 5, "streaming": True,
                     "seed": 3, "shuffle": True, "batch_size": 4, "rank": 1, "world_size": 2, "drop_last": False,
                     "even_batches": True},
    "lanes": {"version": 1, "epoch": 0, "batches_served": 3, "num_shards": 3, "shuffle_buffer": 4,
              "streaming": True, "seed": 3, "shuffle": True, "batch_size": 4, "rank": 0, "world_size": 1,
              "drop_last": False, "lanes": {"0": [[0, 1, 0], [1, 1, 0]], "1": [[2, 1, 0]]},
              "lane_batches": {"0": 2, "1": 1}, "last_lane": 0},
    "lanes_ranks": {"version": 1, "epoch": 0, "batches_served": 2, "num_shards": 3, "shuffle_buffer": 4,
                    "streaming": True, "seed": 3, "shuffle": True, "batch_size": 4, "rank": 0, "world_size": 2,
                    "drop_last": False, "lanes": {"0": [[0, 1, 0], [1, 1, 0]]}, "lane_batches": {"0": 2},
                    "last_lane": 0},
}


def _epoch(loader: Any, out: str) -> list[list[int]]:
    return [b[out].tolist() for b in loader]


def _cut(loader: Any, out: str, cut: int) -> tuple[list[list[int]], dict[str, Any]]:
    """The first ``cut`` batches, and the state then (the iteration left there)."""
    it = iter(loader)
    head = [next(it)[out].tolist() for _ in range(cut)]
    state = loader.state_dict()
    del it
    return head, state


@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_a_state_saved_by_the_earlier_format_resumes_with_the_remaining_batches(dr: fd.Driver, kind: str) -> None:
    out, args, cut = KINDS[kind]
    full = _epoch(dr.dataloader([out], **args()), out)
    head, state = _cut(dr.dataloader([out], **args()), out, cut)
    assert list(state.items()) == list(SAVED[kind].items())  # the format, key order included, is unchanged
    resumed = dr.dataloader([out], **{**args(), "num_workers": 0})
    resumed.load_state_dict(SAVED[kind])
    assert head + _epoch(resumed, out) == full


@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_each_kind_saves_plain_values_and_resumes_exactly_where_it_stopped(dr: fd.Driver, kind: str) -> None:
    out, args, cut = KINDS[kind]
    full = _epoch(dr.dataloader([out], **args()), out)
    for at in (1, cut, len(full) - 1):
        head, state = _cut(dr.dataloader([out], **args()), out, at)
        assert json.loads(json.dumps(state)) == state and state["batches_served"] == at
        resumed = dr.dataloader([out], **args())
        resumed.load_state_dict(json.loads(json.dumps(state)))
        assert resumed.state_dict() == state  # a restored position says where it is, before a batch
        assert head + _epoch(resumed, out) == full, f"resumed after {at} batches"
        # The epoch ran to its end: the state is the next epoch's start, and resumes there.
        after = resumed.state_dict()
        assert (after["epoch"], after["batches_served"]) == (1, 0) and "lanes" not in after
        again = dr.dataloader([out], **args())
        again.load_state_dict(after)
        nxt = dr.dataloader([out], **args())
        nxt.set_epoch(1)
        assert _epoch(again, out) == _epoch(nxt, out)


@pytest.mark.parametrize("kind", [k for k in KIND_PARAMS if k.values[0] in ("map", "stream", "lanes")])
def test_a_refused_state_leaves_the_restored_position_as_it_was(dr: fd.Driver, kind: str) -> None:
    out, args, cut = KINDS[kind]
    full = _epoch(dr.dataloader([out], **args()), out)
    _, state = _cut(dr.dataloader([out], **args()), out, cut)
    loader = dr.dataloader([out], **args())
    loader.load_state_dict(state)
    bad = {**state, "batches_served": 999}
    if kind == "lanes":  # lanes that do not add up to the batches served
        bad = {**state, "batches_served": state["batches_served"] + 1}
        message = r"the saved position of the stream in shards is incomplete or impossible"
    else:
        message = r"cannot resume: the saved position is impossible"
    with pytest.raises(fd.FlowdataError, match=message):
        loader.load_state_dict(bad)
    with pytest.raises(fd.FlowdataError, match=r"this loader differs from the saved one \(seed: saved 4, now 3\)"):
        loader.load_state_dict({**state, "seed": 4})
    assert loader.state_dict() == state
    assert _epoch(loader, out) == full[cut:]


def test_the_epoch_order_is_one_frozen_value() -> None:
    order = EpochOrder(batch_size=4, shuffle=True, seed=3, shuffle_buffer=0)
    assert order.shuffle_buffer == 1  # a buffer holds at least one item
    later = order.next_epoch()
    assert (order.epoch, later.epoch, order.with_epoch(5).epoch) == (0, 1, 5)
    assert later == dataclasses.replace(order, epoch=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        order.epoch = 2  # type: ignore[misc]


def test_the_loader_selects_the_epoch_of_what_orders_it(dr: fd.Driver) -> None:
    # Map-style: its sampler (what Lightning drives); a stream: itself. Both change the order.
    for out, args in (("x", dict(inputs={"n": 23}, batch_size=4, shuffle=True)),
                      ("t", dict(inputs={"n": 23}, batch_size=4, shuffle=True, shuffle_buffer=5))):
        loader = dr.dataloader([out], **args)
        first = _epoch(loader, out)
        assert loader.epoch == 0 and loader.state_dict()["epoch"] == 1
        second = _epoch(loader, out)  # iterated again after a complete epoch: the next one
        assert loader.epoch == 1 and second != first
        loader.set_epoch(0)
        assert _epoch(loader, out) == first
