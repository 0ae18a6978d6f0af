"""Streaming loaders: Sequential sources and streaming=True, sharded without duplicates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowdata as fd

FLOW = """
import torch
from flowdata import Collect, Parallel, Sequential, reduce
from flowdata.stats import Count

PULLED = []

def item(n: int) -> Parallel[str]:
    for i in range(n):
        yield f"rec-{i:04d}"

def tick(n: int) -> Sequential[int]:
    yield from range(n)

def name(item: str) -> str:
    return item

def twice(tick: int) -> int:
    return 2 * tick

def noisy(item: str, sample_rng: torch.Generator) -> float:
    return float(torch.rand(1, generator=sample_rng))

def picky(item: str) -> str:
    if item.endswith("7"):
        raise ValueError("sevens are bad")
    return item

@reduce(Count)
def n_ticks(tick: Collect[int]) -> int: ...

def scaled(tick: int, n_ticks: int) -> float:
    return tick / n_ticks
"""


@pytest.fixture
def dr(make_module: Callable[[str], Any]) -> fd.Driver:
    return fd.Builder().with_modules(make_module(FLOW)).build()


def _names(loader: Any, key: str = "name") -> list[Any]:
    return [x for b in loader for x in (b[key] if isinstance(b[key], list) else b[key].tolist())]


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_every_item_exactly_once_per_epoch(dr: fd.Driver, workers: int) -> None:
    loader = dr.dataloader(["name"], inputs={"n": 97}, batch_size=8, num_workers=workers, streaming=True, shuffle=True)
    assert loader.streaming
    names = _names(loader)
    assert sorted(names) == [f"rec-{i:04d}" for i in range(97)]


@pytest.mark.procs
def test_ranks_and_workers_shard_the_stream(dr: fd.Driver) -> None:
    names: list[str] = []
    for rank in range(2):
        loader = dr.dataloader(["name"], inputs={"n": 50}, batch_size=4, num_workers=2, streaming=True, rank=rank, world_size=2)
        names += _names(loader)
    assert sorted(names) == [f"rec-{i:04d}" for i in range(50)]


def test_shuffle_buffer_is_seeded_and_changes_with_epoch(dr: fd.Driver) -> None:
    def run(seed: int, epoch: int) -> list[str]:
        loader = dr.dataloader(["name"], inputs={"n": 60}, batch_size=60, streaming=True, shuffle=True, shuffle_buffer=16, seed=seed)
        loader.set_epoch(epoch)
        return _names(loader)

    plain = _names(dr.dataloader(["name"], inputs={"n": 60}, batch_size=60, streaming=True))
    assert plain == [f"rec-{i:04d}" for i in range(60)]
    a, b, c = run(1, 0), run(1, 0), run(1, 1)
    assert a == b and a != c and a != plain and sorted(a) == plain
    # A bounded buffer: an item never moves earlier than (its position - buffer size).
    assert all(plain.index(x) <= pos + 16 for pos, x in enumerate(a))


def test_sequential_source_streams_with_statistics(dr: fd.Driver) -> None:
    loader = dr.dataloader(["twice", "scaled"], inputs={"n": 20}, batch_size=5)
    assert loader.streaming and loader.stats["n_ticks"] == 20
    batches = list(loader)
    assert _names(batches, "twice") == [2 * i for i in range(20)]
    assert batches[0]["scaled"].tolist() == [0.0, 0.05, 0.1, 0.15, 0.2]


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_resume(dr: fd.Driver, workers: int) -> None:
    args: dict[str, Any] = {"inputs": {"n": 83}, "batch_size": 5, "num_workers": workers, "streaming": True, "shuffle": True, "seed": 3}
    expected = _names(dr.dataloader(["name", "noisy"], **args), "noisy")
    first = dr.dataloader(["name", "noisy"], **args)
    it = iter(first)
    head = [x for _ in range(4) for x in next(it)["noisy"].tolist()]
    state = first.state_dict()
    del it
    resumed = dr.dataloader(["name", "noisy"], **args)
    resumed.load_state_dict(state)
    assert head + _names(resumed, "noisy") == expected


@pytest.mark.procs
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_streaming_batches_identical_for_any_workers_and_in_order(dr: fd.Driver) -> None:
    runs = [
        _names(dr.dataloader(["name", "noisy"], inputs={"n": 61}, batch_size=4, num_workers=w, streaming=True, shuffle=True, seed=2), "noisy")
        for w in (0, 1, 2, 3)
    ]
    assert all(r == runs[0] for r in runs)
    in_order = _names(dr.dataloader(["name"], inputs={"n": 61}, batch_size=4, num_workers=2, streaming=True))
    assert in_order == [f"rec-{i:04d}" for i in range(61)]


@pytest.mark.procs
def test_streaming_resume_with_other_workers(dr: fd.Driver) -> None:
    args: dict[str, Any] = {"inputs": {"n": 50}, "batch_size": 3, "streaming": True, "shuffle": True, "seed": 9}
    expected = _names(dr.dataloader(["name"], num_workers=0, **args))
    first = dr.dataloader(["name"], num_workers=2, **args)
    it = iter(first)
    head = [x for _ in range(5) for x in next(it)["name"]]
    state = first.state_dict()
    del it
    resumed = dr.dataloader(["name"], num_workers=1, **args)
    resumed.load_state_dict(state)
    assert head + _names(resumed) == expected


@pytest.mark.procs
def test_streaming_skip(dr: fd.Driver) -> None:
    loader = dr.dataloader(["picky"], inputs={"n": 30}, batch_size=4, num_workers=2, streaming=True, on_error="skip")
    got = _names(loader, "picky")
    assert sorted(got) == [f"rec-{i:04d}" for i in range(30) if i % 10 != 7]
    assert sorted(s.index for s in loader.report.skipped) == [7, 17, 27]
    with pytest.raises(TypeError, match=r"a streaming loader has no length"):
        len(loader)


class _Info:
    def __init__(self, id: int, num_workers: int) -> None:
        self.id, self.num_workers = id, num_workers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(0, 60),
    batch_size=st.integers(1, 9),
    workers=st.integers(1, 4),
    world_size=st.integers(1, 3),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    start=st.integers(0, 5),
)
def test_stream_sharding_property(
    stream_driver: fd.Driver, n: int, batch_size: int, workers: int, world_size: int, shuffle: bool, drop_last: bool, start: int
) -> None:
    import flowdata.loader.datasets as streaming

    seen: list[int] = []
    for rank in range(world_size):
        loader = stream_driver.dataloader(
            ["name"], inputs={"n": n}, batch_size=batch_size, streaming=True, shuffle=shuffle,
            shuffle_buffer=5, rank=rank, world_size=world_size, drop_last=drop_last, even_batches=False,
        )
        ds = loader.dataset
        reference = [idx for _, idx, _ in ds.batches()]  # this rank's batches, in order
        ds.restore({**ds.state(), "batches_served": min(start, len(reference))})
        per_worker = []
        original = streaming.get_worker_info
        try:
            for w in range(workers):
                streaming.get_worker_info = lambda w=w: _Info(w, workers)  # type: ignore[assignment]
                per_worker.append([b.indices for b in ds])
        finally:
            streaming.get_worker_info = original
        # torch takes batches from the workers in turn, skipping those that ran out.
        merged, cursors = [], [0] * workers
        while any(c < len(p) for c, p in zip(cursors, per_worker)):
            for w in range(workers):
                if cursors[w] < len(per_worker[w]):
                    merged.append(per_worker[w][cursors[w]])
                    cursors[w] += 1
        assert merged == reference[start:]  # in order, resumed exactly, whatever the workers
        seen += [i for b in reference for i in b]
    assert len(seen) == len(set(seen))
    if not drop_last:
        assert sorted(seen) == list(range(n))


@pytest.mark.procs
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 40), batch_size=st.integers(1, 6), workers=st.integers(0, 1), world_size=st.integers(2, 3),
       shuffle=st.booleans())
def test_a_stream_is_evened_out_between_ranks_by_default(
    stream_driver: fd.Driver, n: int, batch_size: int, workers: int, world_size: int, shuffle: bool
) -> None:
    # Streamed (streaming=True): the ranks' batch counts are not known ahead, but every worker
    # reads the whole stream, so the last round is held until the stream ends and re-cut as
    # the indexed loader's is. Every rank gets the same batches' sizes; the repeats are marked.
    shapes, real, padded, remainders = set(), [], 0, set()
    for rank in range(world_size):
        loader = stream_driver.dataloader(["name"], inputs={"n": n}, batch_size=batch_size, streaming=True,
                                          shuffle=shuffle, shuffle_buffer=5, rank=rank, world_size=world_size,
                                          num_workers=workers)
        batches = [list(b["name"]) for b in loader]
        shapes.add(tuple(len(b) for b in batches))
        real += [x for k, b in enumerate(batches) for x in b[: len(b) - loader.padding(k)]]
        padded += loader.report.padded
        remainders.add(loader.remainder)
    assert len(shapes) == 1
    assert sorted(real) == [f"rec-{i:04d}" for i in range(n)]
    assert padded == -(-n // world_size) * world_size - n
    assert remainders == {n % (batch_size * world_size)}


@pytest.fixture(scope="module")
def stream_driver(tmp_path_factory: pytest.TempPathFactory) -> fd.Driver:
    import importlib.util
    import sys

    path = tmp_path_factory.mktemp("stream") / "stream_prop_flow.py"
    path.write_text(FLOW)
    spec = importlib.util.spec_from_file_location("stream_prop_flow", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["stream_prop_flow"] = module
    spec.loader.exec_module(module)
    return fd.Builder().with_modules(module).build()


def test_a_chained_source_is_indexed_not_streamed() -> None:
    from tests.dataflows import chained_groups

    dr = fd.Builder().with_modules(chained_groups).build()
    inputs = chained_groups.CASES[0]
    with pytest.raises(fd.InputError, match=r"source 'word_item' collects group 'sentence', so it cannot be streamed"):
        dr.dataloader(["word_length"], inputs=inputs, streaming=True)
    loader = dr.dataloader(["word_length", "word_item"], inputs=inputs, batch_size=2)
    assert [w for b in loader for w in b["word_item"]] == ["ccc", "dddd", "eeeee"]
    assert loader.stats == {}  # the first group's pass fed the source; no statistics were asked for
    assert dr.run_sample(["word_length"], index=1, inputs=inputs) == {"word_length": 4}
