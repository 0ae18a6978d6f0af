"""Driver.dataloader(): batches, determinism across workers, exactly once, resume, errors
(a source that raises while yielding is the same NodeError as under execute()), chained
groups, and the statistics pass on an executor of the caller's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flowdata as fd
from flowdata.loader import DataLoader, EpochBatches, EpochOrder
from flowdata.stats import Stats

FLOW = """
import os
import time
import torch
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> Parallel[dict]:
    for i in range(n):
        yield {"path": f"clip-{i}.wav", "label": i % 3}

def feature(item: dict, sample_index: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(sample_index)
    return 5.0 + 2.0 * torch.randn(4, generator=g)

def label(item: dict) -> int:
    return item["label"]

def path(item: dict) -> str:
    return item["path"]

@reduce(Welford, dim=0)
def feature_stats(feature: Collect[torch.Tensor]) -> Stats: ...

def normalized(feature: torch.Tensor, feature_stats: Stats) -> torch.Tensor:
    return ((feature - feature_stats.mean) / feature_stats.std).float()

def augmented(normalized: torch.Tensor, sample_rng: torch.Generator) -> torch.Tensor:
    return normalized + 0.1 * torch.randn(normalized.shape, generator=sample_rng)

def fragile(item: dict) -> int:
    if item["label"] == 2 and item["path"].endswith(("5.wav", "8.wav")):
        raise ValueError("corrupt " + item["path"])
    return item["label"]

def crash(item: dict, sample_index: int) -> int:
    if sample_index == 37:
        os.kill(os.getpid(), 9)
    return sample_index
"""

OUTPUTS = ["augmented", "label", "path"]


@pytest.fixture
def dr(make_module: Callable[[str], Any]) -> fd.Driver:
    return fd.Builder().with_modules(make_module(FLOW)).build()


def _collect(loader: Any) -> list[dict[str, Any]]:
    return [dict(b) for b in loader]


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        for k in x:
            if isinstance(x[k], torch.Tensor):
                if not torch.equal(x[k], y[k]):
                    return False
            elif x[k] != y[k]:
                return False
    return True


def test_batches_are_dicts_collated_the_torch_way(dr: fd.Driver) -> None:
    loader = dr.dataloader(OUTPUTS, inputs={"n": 50}, batch_size=8)
    assert isinstance(loader, torch.utils.data.DataLoader) and isinstance(loader, DataLoader)
    batches = _collect(loader)
    assert len(batches) == len(loader) == 7
    first = batches[0]
    assert first["augmented"].shape == (8, 4) and first["augmented"].dtype == torch.float32
    assert first["label"].tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    assert first["path"] == [f"clip-{i}.wav" for i in range(8)]
    assert batches[-1]["label"].shape == (2,)
    stats = loader.stats["feature_stats"]
    assert stats.count.tolist() == [50] * 4
    all_norm = torch.cat([b["normalized"] for b in dr.dataloader(["normalized"], inputs={"n": 50}, batch_size=50)])
    assert torch.allclose(all_norm.double().mean(0), torch.zeros(4, dtype=torch.float64), atol=1e-6)


@pytest.mark.procs
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_identical_batches_for_any_number_of_workers(dr: fd.Driver) -> None:
    runs = []
    for workers in (0, 1, 2, 3):
        loader = dr.dataloader(OUTPUTS, inputs={"n": 101}, batch_size=10, shuffle=True, seed=7, num_workers=workers)
        runs.append(_collect(loader))
    for other in runs[1:]:
        assert _same(runs[0], other)


def test_set_epoch_changes_shuffle_and_rng(dr: fd.Driver) -> None:
    loader = dr.dataloader(["augmented", "path"], inputs={"n": 40}, batch_size=40, shuffle=True, seed=1)
    e0 = _collect(loader)[0]
    e1 = _collect(loader)[0]  # iterated again after a complete epoch: epoch 1, as set_epoch(1) gives
    assert loader.epoch == 1
    loader.set_epoch(0)
    again = _collect(loader)[0]
    loader.set_epoch(1)
    assert _collect(loader)[0]["path"] == e1["path"]
    assert e0["path"] == again["path"] and torch.equal(e0["augmented"], again["augmented"])
    assert e0["path"] != e1["path"] and sorted(e0["path"]) == sorted(e1["path"])
    by_path0 = dict(zip(e0["path"], e0["augmented"], strict=True))
    by_path1 = dict(zip(e1["path"], e1["augmented"], strict=True))
    assert not torch.equal(by_path0["clip-3.wav"], by_path1["clip-3.wav"])  # new sample_rng stream
    unshuffled = _collect(dr.dataloader(["path"], inputs={"n": 40}, batch_size=40))[0]["path"]
    assert unshuffled == [f"clip-{i}.wav" for i in range(40)]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 120),
    batch_size=st.integers(1, 17),
    world_size=st.integers(1, 4),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    epoch=st.integers(0, 3),
    skipped=st.sets(st.integers(0, 119), max_size=10),
    even=st.booleans(),
)
def test_exactly_once_across_ranks(
    n: int, batch_size: int, world_size: int, shuffle: bool, drop_last: bool, epoch: int, skipped: set[int],
    even: bool,
) -> None:
    indices = [i for i in range(n) if i not in skipped]
    seen: list[int] = []
    sizes = []
    shapes = set()
    last_round: list[bool] = []
    remainders = set()
    for rank in range(world_size):
        s = EpochBatches(indices, EpochOrder(batch_size, shuffle=shuffle, seed=5, rank=rank, world_size=world_size,
                                             drop_last=drop_last, even=even, epoch=epoch))
        batches = list(s)
        assert len(batches) == len(s) and sum(len(b) for b in batches) == s.samples()
        assert all(len(b) <= batch_size for b in batches)
        if drop_last:
            assert all(len(b) == batch_size for b in batches)
        sizes.append(sum(len(b) for b in batches))
        shapes.add(tuple(len(b) for b in batches))
        # The padding: the last rows of the last batch (loader.padding(b) counts them).
        assert [b.padding for b in batches] == [s.padding(k) for k in range(len(batches))]
        assert all(b.padding == 0 for b in batches[:-1])
        seen += [i for b in batches for i in b[: len(b) - b.padding]]
        if batches and s.remainder:
            last = batches[-1]
            last_round += [False] * (len(last) - last.padding) + [True] * last.padding  # padding?
        remainders.add(s.remainder)
    assert len(seen) == len(set(seen))  # never twice, padding aside
    if drop_last or (even and world_size > 1):
        assert len(set(sizes)) == 1  # every rank the same number of samples (DDP-safe)
    if not drop_last:
        assert sorted(seen) == indices  # every sample once (padding aside)
        assert max(sizes) - min(sizes) <= 1  # uneven division: ranks differ by one at most
    if even and not drop_last and world_size > 1:
        assert len(shapes) == 1  # the same number of batches of the same sizes
        assert sum(sizes) == -(-len(indices) // world_size) * world_size  # DistributedSampler's count
        # What Accelerate's gather_for_metrics keeps of the ranks' last batches gathered: the
        # last round's samples, every repeat after them.
        (remainder,) = remainders
        assert remainder == len(indices) % (batch_size * world_size)
        if remainder:
            assert last_round == [False] * remainder + [True] * (len(last_round) - remainder)


def test_an_evened_loader_resumes_with_its_padding_and_its_state_says_even_batches(dr: fd.Driver) -> None:
    # 9 samples over 2 ranks at batch_size=2: rank 1 gets 5 samples, its last batch one repeat.
    args: dict[str, Any] = {"inputs": {"n": 9}, "batch_size": 2, "shuffle": True, "seed": 2, "rank": 1,
                            "world_size": 2}
    whole = dr.dataloader(["path"], **args)
    full = [b["path"] for b in whole]
    assert [len(b) for b in full] == [2, 2, 1] and [whole.padding(b) for b in range(3)] == [0, 0, 1]
    assert whole.report.padded == 1 and whole.remainder == 1
    first = dr.dataloader(["path"], **args)
    it = iter(first)
    head = [next(it)["path"] for _ in range(2)]
    state = first.state_dict()
    assert state["even_batches"] is True
    resumed = dr.dataloader(["path"], **args)
    resumed.load_state_dict(state)
    assert head + [b["path"] for b in resumed] == full and resumed.report.padded == 1
    uneven = dr.dataloader(["path"], even_batches=False, **args)
    assert len(uneven) == 2 and uneven.remainder == 0 and uneven.padding(1) == 0
    with pytest.raises(fd.FlowdataError, match=r"cannot resume: this loader differs from the saved one "
                                               r"\(even_batches: saved True, now False\)"):
        uneven.load_state_dict(state)
    assert "even_batches" not in dr.dataloader(["path"], inputs={"n": 9}, batch_size=2).state_dict()  # one process


def test_ranks_shard_the_loader(dr: fd.Driver) -> None:
    paths = []
    for rank in range(3):
        loader = dr.dataloader(["path"], inputs={"n": 31}, batch_size=4, shuffle=True, rank=rank, world_size=3,
                               even_batches=False)
        paths += [p for b in loader for p in b["path"]]
    assert sorted(paths) == sorted(f"clip-{i}.wav" for i in range(31))


@pytest.mark.procs
@pytest.mark.parametrize(("before", "after"), [(0, 0), (2, 0), (0, 2), (2, 3)])
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_resume_gives_exactly_the_remaining_batches(dr: fd.Driver, before: int, after: int) -> None:
    args: dict[str, Any] = {"inputs": {"n": 90}, "batch_size": 8, "shuffle": True, "seed": 11}
    full = dr.dataloader(OUTPUTS, num_workers=before, **args)
    full.set_epoch(2)
    expected = _collect(full)
    first = dr.dataloader(OUTPUTS, num_workers=before, **args)
    first.set_epoch(2)
    it = iter(first)
    head = [dict(next(it)) for _ in range(5)]
    state = first.state_dict()
    del it
    resumed = dr.dataloader(OUTPUTS, num_workers=after, **args)
    resumed.load_state_dict(state)
    rest = _collect(resumed)
    assert _same(head + rest, expected)
    assert resumed.epoch == 2
    resumed.set_epoch(2)
    assert _same(_collect(resumed), expected)  # selected again, the epoch starts at batch 0


def test_resume_refuses_a_different_loader(dr: fd.Driver) -> None:
    state = dr.dataloader(["path"], inputs={"n": 10}, batch_size=2, seed=1).state_dict()
    other = dr.dataloader(["path"], inputs={"n": 10}, batch_size=3, seed=1)
    with pytest.raises(fd.FlowdataError, match=r"cannot resume: this loader differs from the saved one \(batch_size: saved 2, now 3\)"):
        other.load_state_dict(state)


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_sample_error_raised_in_main_process(dr: fd.Driver, workers: int) -> None:
    loader = dr.dataloader(["fragile"], inputs={"n": 30}, batch_size=4, num_workers=workers)
    pattern = (
        r"node 'fragile' \(.*\) failed on sample 5 of group 'item' \(pass 1, worker (main|\d \(pid \d+\))\): "
        r"ValueError: corrupt clip-5.wav\n    item: \{'path': 'clip-5.wav', 'label': 2\}"
    )
    with pytest.raises(fd.SampleError, match=pattern) as info:
        _collect(loader)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_skip_records_and_continues(dr: fd.Driver, workers: int) -> None:
    loader = dr.dataloader(["fragile", "path"], inputs={"n": 30}, batch_size=4, num_workers=workers, on_error="skip")
    batches = _collect(loader)
    paths = [p for b in batches for p in b["path"]]
    assert "clip-5.wav" not in paths and "clip-8.wav" not in paths and len(paths) == 28
    skipped = loader.report.skipped
    assert [(s.index, s.node, s.error) for s in skipped] == [(5, "fragile", "ValueError: corrupt clip-5.wav"), (8, "fragile", "ValueError: corrupt clip-8.wav")]
    assert loader.report.node_calls["fragile"] == 28
    with pytest.raises(fd.TooManySkipped, match=r"more than max_skipped=1"):
        _collect(dr.dataloader(["fragile"], inputs={"n": 30}, batch_size=30, on_error="skip", max_skipped=1))


def test_skipped_in_pass_one_are_left_out_of_the_epoch(make_module: Callable[[str], Any]) -> None:
    dr = fd.Builder().with_modules(make_module("""
    import torch
    from flowdata import Collect, Parallel, reduce
    from flowdata.stats import Count
    def item(n: int) -> Parallel[int]:
        yield from range(n)
    def checked(item: int) -> int:
        if item in (3, 4):
            raise ValueError("bad")
        return item
    @reduce(Count)
    def count(checked: Collect[int]) -> int: ...
    def out(item: int, count: int) -> int:
        return item
    """)).build()
    loader = dr.dataloader(["out"], inputs={"n": 10}, batch_size=20, on_error="skip")
    assert loader.stats["count"] == 8
    assert [int(x) for x in next(iter(loader))["out"]] == [0, 1, 2, 5, 6, 7, 8, 9]
    assert [s.index for s in loader.report.skipped] == [3, 4]


@pytest.mark.procs
def test_worker_killed_is_an_error_not_a_hang(dr: fd.Driver) -> None:
    loader = dr.dataloader(["crash"], inputs={"n": 80}, batch_size=8, num_workers=2)
    with pytest.raises(fd.FlowdataError, match=r"a DataLoader worker died \(.+\) while the loader waited for batch \d+ of epoch 0; the workers held batches \d+\.\.\d+ \(samples (\d+)-(\d+)\)") as info:
        _collect(loader)
    import re

    lo, hi = (int(x) for x in re.search(r"samples (\d+)-(\d+)", str(info.value)).groups())  # type: ignore[union-attr]
    assert lo <= 37 <= hi  # the sample that killed its worker is among those named


@pytest.mark.procs
def test_spawn_start_method(dr: fd.Driver) -> None:
    import multiprocessing

    from tests.dataflows import map_reduce

    drm = fd.Builder().with_modules(map_reduce).build()
    ctx = multiprocessing.get_context("spawn")
    loader = drm.dataloader(["plus_one"], inputs={"n": 40}, batch_size=16, num_workers=2, multiprocessing_context=ctx)
    values = [int(x) for b in loader for x in b["plus_one"]]
    assert values == [2 * i + 1 for i in range(40)]


def test_generator_items_go_to_an_arrow_index(dr: fd.Driver, tmp_path: Any) -> None:
    ds = dr.dataset(["path", "label"], inputs={"n": 20}, cache_dir=tmp_path)
    assert type(ds.index).__name__ == "ArrowIndex" and ds.index.path.startswith(str(tmp_path))
    assert ds[7] == {"path": "clip-7.wav", "label": 1}
    assert len(ds) == 20


def test_items_arrow_cannot_hold(make_module: Callable[[str], Any]) -> None:
    dr = fd.Builder().with_modules(make_module("""
    from flowdata import Parallel
    class Blob:
        pass
    def item(n: int) -> Parallel[object]:
        for _ in range(n):
            yield Blob()
    def size(item: object) -> int:
        return 1
    """)).build()
    with pytest.raises(fd.FlowdataError, match=r"source 'item' yields items an Arrow index cannot hold .*\n  fix: yield light descriptions of samples"):
        dr.dataloader(["size"], inputs={"n": 3})


def test_tuple_items_round_trip(make_module: Callable[[str], Any]) -> None:
    dr = fd.Builder().with_modules(make_module("""
    from flowdata import Parallel
    def item(n: int) -> Parallel[tuple[str, int]]:
        for i in range(n):
            yield (f"p{i}", i)
    def both(item: tuple[str, int]) -> str:
        assert isinstance(item, tuple)
        return f"{item[0]}:{item[1]}"
    """)).build()
    assert [s for b in dr.dataloader(["both"], inputs={"n": 5}, batch_size=5) for s in b["both"]] == [f"p{i}:{i}" for i in range(5)]


def test_list_source_is_used_as_the_index(make_module: Callable[[str], Any]) -> None:
    dr = fd.Builder().with_modules(make_module("""
    from flowdata import Parallel
    def item(names: list[str]) -> Parallel[str]:
        return list(names)
    def upper(item: str) -> str:
        return item.upper()
    """)).build()
    ds = dr.dataset(["upper"], inputs={"names": ["a", "b"]})
    assert type(ds.index).__name__ == "SequenceIndex" and ds[1] == {"upper": "B"}


def test_user_collate_fn_and_pin_memory(dr: fd.Driver) -> None:
    def collate(rows: list[dict[str, Any]]) -> tuple[torch.Tensor, list[str]]:
        return torch.stack([r["augmented"] for r in rows]), [r["path"] for r in rows]

    loader = dr.dataloader(["augmented", "path"], inputs={"n": 9}, batch_size=4, collate_fn=collate, pin_memory=torch.cuda.is_available())
    x, paths = next(iter(loader))
    assert x.shape == (4, 4) and paths == ["clip-0.wav", "clip-1.wav", "clip-2.wav", "clip-3.wav"]


def test_whole_value_outputs_rejected(dr: fd.Driver) -> None:
    with pytest.raises(fd.InputError, match=r"dataloader\(\) yields per-sample values, but 'feature_stats' is a whole value"):
        dr.dataloader(["feature_stats"], inputs={"n": 3})


def test_progress_bars(dr: fd.Driver, capsys: pytest.CaptureFixture[str]) -> None:
    loader = dr.dataloader(["normalized"], inputs={"n": 64}, batch_size=16, progress=True)
    assert len(_collect(loader)) == 4
    err = capsys.readouterr().err
    assert "statistics" in err and "epoch 0" in err




def test_dataset_items_are_raw_values_and_plain_torch_loader_works(make_module: Callable[[str], Any]) -> None:
    dr = fd.Builder().with_modules(make_module("""
    from flowdata import Parallel
    def item(n: int) -> Parallel[dict]:
        for i in range(n):
            yield {"path": f"p{i}", "label": i}
    def meta(item: dict) -> dict:
        return {"name": item["path"], "double": 2 * item["label"]}
    def pair(item: dict) -> tuple[str, int]:
        return (item["path"], item["label"])
    def label(item: dict) -> int:
        return item["label"]
    """)).build()
    ds = dr.dataset(["meta", "pair", "label"], inputs={"n": 10})
    assert ds[7] == {"meta": {"name": "p7", "double": 14}, "pair": ("p7", 7), "label": 7}
    assert type(ds[7]["label"]) is int
    plain = torch.utils.data.DataLoader(ds, batch_size=4)
    first = next(iter(plain))
    assert first["label"].tolist() == [0, 1, 2, 3] and first["meta"]["name"] == ["p0", "p1", "p2", "p3"]


def test_a_new_iteration_starts_at_the_first_batch(dr: fd.Driver) -> None:
    loader = dr.dataloader(["path"], inputs={"n": 20}, batch_size=5)
    for _ in loader:
        break
    assert next(iter(loader))["path"][0] == "clip-0.wav"
    assert [b["path"][0] for b in loader] == ["clip-0.wav", "clip-5.wav", "clip-10.wav", "clip-15.wav"]


def test_flowdata_dataloader_is_exported() -> None:
    assert fd.DataLoader is DataLoader


def test_the_usual_epoch_loop_resumes_where_it_stopped(dr: fd.Driver) -> None:
    args: dict[str, Any] = {"inputs": {"n": 30}, "batch_size": 4, "shuffle": True, "seed": 2}
    full = dr.dataloader(["path"], **args)
    expected = []
    for e in range(2):
        full.set_epoch(e)
        expected += [b["path"] for b in full]
    first = dr.dataloader(["path"], **args)
    first.set_epoch(0)
    it = iter(first)
    head = [next(it)["path"] for _ in range(3)]
    state = first.state_dict()
    del it
    resumed = dr.dataloader(["path"], **args)
    resumed.load_state_dict(state)
    rest = []
    for e in range(resumed.epoch, 2):
        resumed.set_epoch(e)  # keeps the restored position for the restored epoch
        rest += [b["path"] for b in resumed]
    assert head + rest == expected


@pytest.mark.procs
def test_arrow_index_with_many_chunks(dr: fd.Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    import flowdata.run.sources.adapters as adapters
    import flowdata.run.sources.arrowindex as index_module

    monkeypatch.setattr(index_module, "_BATCH", 7)  # many record batches, as past 65,536 items
    monkeypatch.setattr(adapters, "_BATCH", 7)  # read by batches that span them
    ds = dr.dataset(["path", "label"], inputs={"n": 50})
    assert ds.index.length == 50 and len(ds.index._open().chunks) == 8
    order = [49, 0, 13, 7, 6, 48, 21, 21]
    assert [r["path"] for r in ds.rows(order, 0)] == [f"clip-{i}.wav" for i in order]
    ints = index_module.write_index((i * 3 for i in range(30)), None, "ints")
    assert isinstance(ints, index_module.ArrowIndex) and ints.take([29, 0, 8, 14]) == [87, 0, 24, 42]
    tuples = index_module.write_index(((f"t{i}", i) for i in range(20)), None, "tuples")
    assert isinstance(tuples, index_module.ArrowIndex) and tuples.take([19, 3]) == [("t19", 19), ("t3", 3)]
    batches = [b["path"] for b in dr.dataloader(["path"], inputs={"n": 50}, batch_size=16, shuffle=True, num_workers=2)]
    assert sorted(p for b in batches for p in b) == sorted(f"clip-{i}.wav" for i in range(50))


def test_batches_travel_inline_and_keep_every_dtype() -> None:
    import pickle

    from flowdata.loader import Batch

    data = {
        "small": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "half": torch.ones(2, dtype=torch.bfloat16),
        "big": torch.zeros(300_000),
        "names": ["a", "b"],
        "nested": {"x": torch.tensor([1, 2])},
    }
    back = pickle.loads(pickle.dumps(Batch(data, [0, 1], [], None, {}, "main")))
    for key in ("small", "half", "big"):
        assert torch.equal(back.data[key], data[key]) and back.data[key].dtype == data[key].dtype
    assert back.data["names"] == ["a", "b"] and torch.equal(back.data["nested"]["x"], torch.tensor([1, 2]))


def test_an_input_named_like_a_node_prunes_what_only_it_needed(build: Callable[..., fd.Driver]) -> None:
    """Giving `scale` (fed by a reduction) leaves the reduction, and its pass, out."""
    dr = build("""
    from flowdata import Collect, Parallel, reduce
    from flowdata.stats import Stats, Welford
    def row(n: int) -> Parallel[int]:
        yield from range(n)
    def expensive(row: int) -> float:
        raise RuntimeError("only the statistics need this node")
    @reduce(Welford)
    def stats(expensive: Collect[float]) -> Stats:
        raise NotImplementedError
    def scale(stats: Stats) -> float:
        return float(stats.std)
    def scaled(row: int, scale: float) -> float:
        return row * scale
    """)
    loader = dr.dataloader(["scaled"], inputs={"n": 6, "scale": 0.5}, batch_size=3, num_workers=0)
    assert dict(loader.stats) == {}
    assert torch.cat([b["scaled"] for b in loader]).tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert dr.run_sample(["scaled"], inputs={"n": 6, "scale": 2.0}, index=3)["scaled"] == 6.0
    assert dr.run_sample(["scaled"], inputs={"scale": 2.0}, item=4)["scaled"] == 8.0
    assert len(dr.plan(["scaled"], inputs=["n", "scale"]).group("row").passes) == 1
    assert len(dr.plan(["scaled"], inputs=["n"]).group("row").passes) == 2


# --- a source that raises while yielding --------------------------------------------------


FAILING_SOURCE = """
from flowdata import Collect, Parallel
def item(n: int) -> Parallel[int]:
    for i in range(n):
        if i == 3:
            raise OSError("disk gone")
        yield i
def doubled(item: int) -> int:
    return 2 * item
def total(doubled: Collect[int]) -> int:
    return sum(doubled)
"""


SOURCE_ERROR = r"node 'item' \(.*:3\) failed: OSError: disk gone \(while producing sample 3\)"


def test_source_error_from_execute(build: Callable[..., fd.Driver]) -> None:
    """What execute() gives today; the loader must say the same."""
    dr = build(FAILING_SOURCE)
    with pytest.raises(fd.NodeError, match=SOURCE_ERROR) as info:
        dr.execute(["total"], inputs={"n": 10})
    assert isinstance(info.value.__cause__, OSError)


@pytest.mark.procs
@pytest.mark.parametrize(("streaming", "workers"), [(False, 0), (False, 2), (True, 0), (True, 2)], ids=["map-0", "map-2", "stream-0", "stream-2"])
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_source_error_from_dataloader_is_a_node_error(build: Callable[..., fd.Driver], streaming: bool, workers: int) -> None:
    dr = build(FAILING_SOURCE)
    with pytest.raises(fd.NodeError, match=SOURCE_ERROR):
        loader = dr.dataloader(["doubled"], inputs={"n": 10}, batch_size=2, num_workers=workers, streaming=streaming)
        for _ in loader:
            pass


# --- chained groups -----------------------------------------------------------------------


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_loader_runs_chained_groups(workers: int) -> None:
    from tests.dataflows import chained_groups

    dr = fd.Builder().with_modules(chained_groups).build()
    inputs = chained_groups.CASES[1]
    assert dr.execute(chained_groups.OUTPUTS, inputs=inputs) == chained_groups._oracle(**inputs)
    expected = [len(w) for s in inputs["sentences"] for w in s.split() if len(w) >= 3]
    assert expected
    loader = dr.dataloader(["word_length"], inputs=inputs, batch_size=4, num_workers=workers)
    got = [int(x) for b in loader for x in b["word_length"]]
    assert got == expected


# --- the statistics pass on an executor of the caller's -----------------------------------


def _stats_equal(a: Stats, b: Stats) -> bool:
    return all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("mean", "std", "var", "min", "max", "count"))


STATS_FLOW = """
import torch
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def feature(item: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(item)
    return 1e4 + torch.randn(3, generator=g, dtype=torch.float64)

@reduce(Welford, dim=0)  # per feature, across samples
def feature_stats(feature: Collect[torch.Tensor]) -> Stats: ...

def normalized(feature: torch.Tensor, feature_stats: Stats) -> torch.Tensor:
    return (feature - feature_stats.mean) / feature_stats.std
"""


@pytest.mark.procs
def test_dataloader_statistics_pass_takes_an_executor(build: Callable[..., fd.Driver], pool: fd.ProcessExecutor) -> None:
    dr = build(STATS_FLOW)
    inputs = {"n": 300}
    base = dr.dataloader(["normalized"], inputs=inputs, batch_size=50)
    base_batches = [b["normalized"] for b in base]
    for executor in ("inline", pool):
        loader = dr.dataloader(["normalized"], inputs=inputs, batch_size=50, executor=executor)
        assert loader.stats.keys() == base.stats.keys() == {"feature_stats"}
        assert _stats_equal(loader.stats["feature_stats"], base.stats["feature_stats"]), executor
        assert int(loader.stats["feature_stats"].count[0]) == 300
        batches = [b["normalized"] for b in loader]
        assert len(batches) == len(base_batches) and all(torch.equal(a, b) for a, b in zip(batches, base_batches, strict=True))


@pytest.mark.procs
def test_dataloader_executor_with_a_two_pass_module(pool: fd.ProcessExecutor) -> None:
    from tests.dataflows import two_pass

    dr = fd.Builder().with_modules(two_pass).build()
    inputs = two_pass.CASES[2]
    base = dr.dataloader(two_pass.LOADER_OUTPUTS, inputs=inputs, batch_size=100)
    assert base.stats
    for executor in ("inline", pool):
        loader = dr.dataloader(two_pass.LOADER_OUTPUTS, inputs=inputs, batch_size=100, executor=executor)
        assert loader.stats == base.stats
        got = {k: [float(x) for b in loader for x in b[k]] for k in two_pass.LOADER_OUTPUTS}
        assert got == two_pass._loader_oracle(**inputs)
