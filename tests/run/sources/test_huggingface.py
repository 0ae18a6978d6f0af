"""Hugging Face datasets as sources: map-style Dataset as the index, IterableDataset
streamed in lanes of shards (exactly once over ranks x workers, resume), and generator
sources that iterate a stream themselves. Offline: every dataset is built here."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ["HF_DATASETS_OFFLINE"] = "1"

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datasets

import flowdata as fd

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

FLOW = """
from typing import Any
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Welford

CALLS = []

def row(data: Any) -> Parallel[dict]:
    return data

def x(row: dict) -> float:
    CALLS.append(row["x"])
    return float(row["x"])

def key(row: dict, sample_index: int) -> int:
    return sample_index

@reduce(Welford)
def x_stats(x: Collect[float]) -> Any: ...

def centered(x: float, x_stats: Any) -> float:
    return x - float(x_stats.mean)

def all_x(x: Collect[float]) -> list[float]:
    return list(x)

def picky(row: dict) -> float:
    if row["x"] % 10 == 7:
        raise ValueError("sevens are bad")
    return float(row["x"])

def stream_row(data: Any) -> Parallel[dict]:
    yield from data

def sx(stream_row: dict) -> float:
    return float(stream_row["x"])
"""

ROWS = 37  # rows per shard: not a multiple of the batch size


def _gen(shards: list[int], log: str = "") -> Iterator[dict[str, int]]:
    for s in shards:
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {s}\n")
        for i in range(ROWS):
            yield {"x": s * 1000 + i}


def _stream(n: int, log: str = "") -> datasets.IterableDataset:
    return datasets.IterableDataset.from_generator(_gen, gen_kwargs={"shards": list(range(n)), "log": log})


def _all(n: int) -> list[float]:
    return sorted(float(s * 1000 + i) for s in range(n) for i in range(ROWS))


@pytest.fixture
def dr(make_module: Callable[[str], Any]) -> fd.Driver:
    return fd.Builder().with_modules(make_module(FLOW)).build()


def _xs(loader: Any, key: str = "x") -> list[float]:
    return [v for b in loader for v in b[key].tolist()]


# --- map-style -----------------------------------------------------------------------------


def test_a_map_style_dataset_is_the_index_read_by_batches(dr: fd.Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = datasets.Dataset.from_dict({"x": list(range(50))})
    keys: list[Any] = []
    real = datasets.Dataset.__getitem__

    def spy(self: Any, key: Any) -> Any:
        keys.append(key)
        return real(self, key)

    monkeypatch.setattr(datasets.Dataset, "__getitem__", spy)
    loader = dr.dataloader(["x"], inputs={"data": ds}, batch_size=8)
    keys.clear()  # the statistics pass may read it; the epoch is what is checked
    got = _xs(loader)
    assert got == [float(i) for i in range(50)]
    assert keys and all(isinstance(k, list) for k in keys)  # one Arrow read per batch, never row by row
    assert len(keys) == 7


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_batches_are_identical_for_any_worker_count_and_exactly_once_over_ranks(
    dr: fd.Driver, workers: int
) -> None:
    ds = datasets.Dataset.from_dict({"x": list(range(101))})
    plain = dr.dataloader(["x", "centered"], inputs={"data": list(ds)}, batch_size=8, shuffle=True, seed=4)
    loader = dr.dataloader(["x", "centered"], inputs={"data": ds}, batch_size=8, shuffle=True, seed=4,
                           num_workers=workers)
    assert [b["x"].tolist() for b in loader] == [b["x"].tolist() for b in plain]
    assert loader.stats["x_stats"].mean.item() == pytest.approx(50.0)
    ranks = [_xs(dr.dataloader(["x"], inputs={"data": ds}, batch_size=8, rank=r, world_size=2,
                               num_workers=workers, even_batches=False)) for r in range(2)]
    assert sorted(ranks[0] + ranks[1]) == [float(i) for i in range(101)]
    evened = [dr.dataloader(["x"], inputs={"data": ds}, batch_size=8, rank=r, world_size=2, num_workers=workers)
              for r in range(2)]
    xs = [[b["x"].tolist() for b in loader] for loader in evened]
    assert [len(b) for b in xs[0]] == [len(b) for b in xs[1]]  # the default evens the ranks out
    real = [v for loader, bs in zip(evened, xs, strict=True) for k, b in enumerate(bs)
            for v in b[: len(b) - loader.padding(k)]]
    assert sorted(real) == [float(i) for i in range(101)] and [e.report.padded for e in evened] == [0, 1]


@pytest.mark.procs
def test_map_style_resume_gives_the_remaining_batches(dr: fd.Driver) -> None:
    ds = datasets.Dataset.from_dict({"x": list(range(60))})
    full = [b["x"].tolist() for b in dr.dataloader(["x"], inputs={"data": ds}, batch_size=7, shuffle=True)]
    loader = dr.dataloader(["x"], inputs={"data": ds}, batch_size=7, shuffle=True)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    again = dr.dataloader(["x"], inputs={"data": ds}, batch_size=7, shuffle=True, num_workers=2)
    again.load_state_dict(state)
    assert [b["x"].tolist() for b in again] == full[3:]


def test_the_dataset_fingerprint_is_part_of_the_pass_cache_key(
    make_module: Callable[[str], Any], tmp_path: Path
) -> None:
    module = make_module(FLOW)
    dr = fd.Builder().with_modules(module).build()
    a = datasets.Dataset.from_dict({"x": list(range(20))})
    first = dr.execute(["x_stats"], inputs={"data": a}, cache_dir=tmp_path)["x_stats"]
    module.CALLS.clear()
    same = dr.execute(["x_stats"], inputs={"data": datasets.Dataset.from_dict({"x": list(range(20))})},
                      cache_dir=tmp_path)["x_stats"]
    assert module.CALLS == []  # the same data: served from the cache
    assert same.mean.item() == first.mean.item()
    other = dr.execute(["x_stats"], inputs={"data": datasets.Dataset.from_dict({"x": list(range(1, 21))})},
                       cache_dir=tmp_path)["x_stats"]
    assert len(module.CALLS) == 20  # other data: computed again, never the stale result
    assert other.mean.item() == pytest.approx(10.5)


# --- streaming ------------------------------------------------------------------------------


@pytest.mark.procs
@pytest.mark.parametrize("shards", [1, 3, 4, 8])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("world_size", [1, 2])
def test_a_stream_in_shards_delivers_every_row_exactly_once(
    dr: fd.Driver, shards: int, workers: int, world_size: int
) -> None:
    got: list[float] = []
    for rank in range(world_size):
        loader = dr.dataloader(["x"], inputs={"data": _stream(shards)}, batch_size=8, num_workers=workers,
                               rank=rank, world_size=world_size, shuffle=shards % 2 == 1, shuffle_buffer=16)
        assert loader.streaming
        got += _xs(loader)
    assert sorted(got) == _all(shards)


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_each_shard_is_opened_once_per_epoch_by_the_worker_that_serves_it(
    dr: fd.Driver, tmp_path: Path, workers: int
) -> None:
    log = tmp_path / "opens.txt"
    loader = dr.dataloader(["x"], inputs={"data": _stream(4, str(log))}, batch_size=8, num_workers=workers)
    assert _xs(loader) != []
    opens = [line.split() for line in log.read_text().splitlines()]
    assert sorted(int(s) for _, s in opens) == [0, 1, 2, 3]  # each shard once, in all
    pids = {p for p, _ in opens}
    if workers:
        assert str(os.getpid()) not in pids  # the main process read no row
        assert len(pids) == 2


@pytest.mark.procs
def test_fewer_shards_than_consumers_splits_examples_and_says_so_once(
    dr: fd.Driver, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="flowdata"):
        got = [_xs(dr.dataloader(["x"], inputs={"data": _stream(1)}, batch_size=4, num_workers=2, rank=r,
                                 world_size=2)) for r in range(2)]
    lines = [r.getMessage() for r in caplog.records if "shard(s) for" in r.getMessage()]
    assert len(lines) == 2  # once per loader
    assert "1 shard(s) for 4 consumers (2 rank(s) x 2 worker(s))" in lines[0]
    assert "read about 4 times and delivered once" in lines[0]
    assert sorted(got[0] + got[1]) == _all(1)


def test_ranks_given_by_hand_over_a_stream_in_shards_say_they_cannot_be_evened(
    dr: fd.Driver, caplog: pytest.LogCaptureFixture
) -> None:
    # rank/world_size given by hand, no process group: each rank reads its own shards
    # (4 shards: 2 each) and cannot even out its batch count with the other; one INFO line
    # per loader says so, and even_batches=False (nothing to even) says nothing.
    with caplog.at_level(logging.INFO, logger="flowdata"):
        got = [_xs(dr.dataloader(["x"], inputs={"data": _stream(4)}, batch_size=4, rank=r, world_size=2))
               for r in range(2)]
    lines = [r.getMessage() for r in caplog.records if "cannot even out" in r.getMessage()]
    assert len(lines) == 2
    assert "read by rank 0 of 2, but torch.distributed has no process group" in lines[0]
    assert "process group initialised before the loader is built" in lines[0]
    assert sorted(got[0] + got[1]) == _all(4)  # every row once across the two ranks
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="flowdata"):
        dr.dataloader(["x"], inputs={"data": _stream(4)}, batch_size=4, rank=0, world_size=2, even_batches=False)
    assert not [r for r in caplog.records if "cannot even out" in r.getMessage()]


@pytest.mark.procs
def test_statistics_over_a_stream_equal_those_over_its_rows(dr: fd.Driver) -> None:
    loader = dr.dataloader(["centered"], inputs={"data": _stream(3)}, batch_size=16, num_workers=2)
    mean = sum(_all(3)) / len(_all(3))
    assert loader.stats["x_stats"].mean.item() == pytest.approx(mean)
    listed = dr.execute(["x_stats"], inputs={"data": [{"x": int(v)} for v in _all(3)]})["x_stats"]
    assert loader.stats["x_stats"].var.item() == pytest.approx(listed.var.item())
    assert sorted(_xs(loader, "centered")) == pytest.approx(sorted(v - mean for v in _all(3)))


@pytest.mark.procs
def test_the_statistics_pass_reads_the_shards_in_parallel_where_it_computes_them(
    dr: fd.Driver, tmp_path: Path
) -> None:
    log = tmp_path / "opens.txt"
    data = _stream(4, str(log))
    inline = dr.execute(["x_stats", "all_x"], inputs={"data": data})
    log.write_text("")
    pooled = dr.execute(["x_stats", "all_x"], inputs={"data": data}, executor=fd.ProcessExecutor(2))
    opens = [line.split() for line in log.read_text().splitlines()]
    assert sorted(int(s) for _, s in opens) == [0, 1, 2, 3]  # each shard read once, in all
    assert str(os.getpid()) not in {p for p, _ in opens}  # by the pool's workers
    assert pooled["all_x"] == inline["all_x"]  # in sample order
    for field in ("mean", "var", "min", "max", "count"):  # merged in a fixed order: bitwise equal
        assert getattr(pooled["x_stats"], field).tolist() == getattr(inline["x_stats"], field).tolist()


def test_the_first_batch_of_an_endless_stream_arrives(dr: fd.Driver) -> None:
    def endless() -> Iterator[dict[str, int]]:
        i = 0
        while True:
            yield {"x": i}
            i += 1

    stream = datasets.IterableDataset.from_generator(endless)
    loader = dr.dataloader(["x"], inputs={"data": stream}, batch_size=5)
    first = next(iter(loader))
    assert first["x"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize("streaming", [False, True])
def test_a_generator_source_iterating_a_stream_loses_nothing_with_workers(
    dr: fd.Driver, workers: int, streaming: bool
) -> None:
    # Inside a torch worker, datasets keeps only that worker's shards; every worker of a
    # plain stream reads all items and computes its own batches: 150 of 300 rows came before.
    stream = datasets.IterableDataset.from_generator(
        lambda shards: ({"x": s * 1000 + i} for s in shards for i in range(150)), gen_kwargs={"shards": [0, 1]})
    loader = dr.dataloader(["sx"], inputs={"data": stream}, batch_size=10, num_workers=workers, streaming=streaming)
    got = _xs(loader, "sx")
    assert len(got) == 300
    assert sorted(got) == sorted(float(s * 1000 + i) for s in (0, 1) for i in range(150))


@pytest.mark.procs
def test_local_parquet_shards_stream_once_each(dr: fd.Driver, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = []
    for s in range(4):
        path = tmp_path / f"part-{s}.parquet"
        pq.write_table(pa.table({"x": [s * 1000 + i for i in range(ROWS)]}), path)
        files.append(str(path))
    stream = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
    assert stream.num_shards == 4
    got = [_xs(dr.dataloader(["x"], inputs={"data": stream}, batch_size=8, num_workers=2, rank=r, world_size=2))
           for r in range(2)]
    assert sorted(got[0] + got[1]) == _all(4)


class _Shards:
    """Any iterable with num_shards and shard(num_shards, index) is streamed by shards."""

    def __init__(self, parts: list[list[int]]):
        self.parts = parts

    @property
    def num_shards(self) -> int:
        return len(self.parts)

    def shard(self, num_shards: int, index: int) -> list[dict[str, int]]:
        assert num_shards == len(self.parts)
        return [{"x": v} for v in self.parts[index]]

    def __iter__(self) -> Iterator[dict[str, int]]:
        return (r for i in range(len(self.parts)) for r in self.shard(len(self.parts), i))


@pytest.mark.procs
def test_any_iterable_in_shards_is_streamed_by_shards(dr: fd.Driver) -> None:
    data = _Shards([[1, 2, 3], [10, 11], [20, 21, 22, 23]])
    assert dr.execute(["all_x"], inputs={"data": data})["all_x"] == [1, 2, 3, 10, 11, 20, 21, 22, 23]
    loader = dr.dataloader(["x", "key"], inputs={"data": data}, batch_size=2, num_workers=2)
    keys = sorted(v for b in loader for v in b["key"].tolist())
    assert keys == [0, 1, 2, 1 << 32, (1 << 32) + 1, 2 << 32, (2 << 32) + 1, (2 << 32) + 2, (2 << 32) + 3]


def test_a_failing_row_names_the_source_the_sample_and_its_shard(dr: fd.Driver) -> None:
    def broken(shards: list[int]) -> Iterator[dict[str, int]]:
        for s in shards:
            for i in range(5):
                if s == 1 and i == 3:
                    raise OSError("truncated file")
                yield {"x": i}

    stream = datasets.IterableDataset.from_generator(broken, gen_kwargs={"shards": [0, 1]})
    with pytest.raises(fd.FlowdataError, match=r"'row' \(.*:\d+\).*truncated file.*sample 4294967299: row 3 of "
                                               r"shard 1"):
        dr.execute(["all_x"], inputs={"data": stream})


@pytest.mark.procs
def test_a_sample_skipped_in_the_statistics_pass_is_left_out_of_every_epoch(
    make_module: Callable[[str], Any]
) -> None:
    module = make_module(FLOW + """
@reduce(Welford)
def picky_stats(picky: Collect[float]) -> Any: ...

def out(picky: float, picky_stats: Any) -> float:
    return picky
""")
    dr = fd.Builder().with_modules(module).build()
    loader = dr.dataloader(["out"], inputs={"data": _stream(2)}, batch_size=8, num_workers=2, on_error="skip")
    got = _xs(loader, "out")
    assert sorted(got) == [v for v in _all(2) if int(v) % 10 != 7]
    assert len(loader.report.skipped) == 6  # 3 per shard (7, 17, 27), reported once each


# --- resume ---------------------------------------------------------------------------------


def _run(dr: fd.Driver, data: Any, workers: int, stop: int | None = None, state: Any = None,
         rank: int = 0, world_size: int = 1) -> tuple[list[Any], Any]:
    loader = dr.dataloader(["x"], inputs={"data": data}, batch_size=6, num_workers=workers, shuffle=True,
                           shuffle_buffer=20, seed=7, rank=rank, world_size=world_size)
    if state is not None:
        loader.load_state_dict(state)
    out = []
    for k, b in enumerate(loader):
        out.append(tuple(b["x"].tolist()))
        if stop is not None and k + 1 == stop:
            return out, loader.state_dict()
    return out, None


@pytest.mark.procs
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shards=st.sampled_from([1, 3, 4, 8]), before=st.sampled_from([0, 2]), after=st.sampled_from([0, 1, 2]),
       world_size=st.sampled_from([1, 2]), stop=st.integers(1, 3))  # 1 shard, 2 ranks x 2 workers: 4 batches a rank
def test_resume_gives_exactly_the_remaining_batches_of_the_uninterrupted_run(
    dr: fd.Driver, shards: int, before: int, after: int, world_size: int, stop: int
) -> None:
    data = _stream(shards)
    every: list[float] = []
    for rank in range(world_size):
        full, _ = _run(dr, data, before, rank=rank, world_size=world_size)
        first, state = _run(dr, data, before, stop=stop, rank=rank, world_size=world_size)
        assert state is not None and sum(state["lane_batches"].values()) == stop
        rest, _ = _run(dr, data, after, state=state, rank=rank, world_size=world_size)
        # The shuffle buffer's rows included: the remaining batches are those of the full run,
        # in its order (at most 2 lanes a rank: 0, 1 or 2 workers take them over in order).
        assert Counter(first) + Counter(rest) == Counter(full)
        assert first + rest == full
        every += [v for b in first + rest for v in b]
    assert sorted(every) == _all(shards)


def test_a_tampered_stream_position_is_refused(dr: fd.Driver) -> None:
    data = _stream(2)
    _, state = _run(dr, data, 0, stop=2)
    state["lane_batches"] = {"0": 5}
    loader = dr.dataloader(["x"], inputs={"data": data}, batch_size=6, shuffle=True, shuffle_buffer=20, seed=7)
    with pytest.raises(fd.FlowdataError, match=r"cannot resume: the saved position of the stream in shards.*do not "
                                               r"add up"):
        loader.load_state_dict(state)


@pytest.mark.procs
def test_a_stream_split_by_node_already_is_not_split_between_ranks_again(dr: fd.Driver) -> None:
    from datasets.distributed import split_dataset_by_node

    part = split_dataset_by_node(_stream(4), rank=1, world_size=2)
    with pytest.raises(fd.InputError, match=r"(?s)source .row. returned a stream already split by node.*2 ranks too.*"
                                            r"fix: return the whole stream"):
        dr.dataloader(["x"], inputs={"data": part}, batch_size=8, rank=0, world_size=2)
    # On its own (one rank per node), the node's part is read as the library splits it: whole.
    got = _xs(dr.dataloader(["x"], inputs={"data": part}, batch_size=8, num_workers=2))
    assert sorted(got) == [float(s * 1000 + i) for s in (1, 3) for i in range(ROWS)]


@pytest.mark.procs
def test_the_dataset_of_a_stream_in_shards_works_under_a_plain_torch_dataloader(dr: fd.Driver) -> None:
    from torch.utils.data import DataLoader

    ds = dr.dataset(["x", "key"], inputs={"data": _stream(4)}, streaming=True)
    assert type(ds).__name__ == "LaneDataset"
    rows = [r for batch in DataLoader(ds, batch_size=5, num_workers=2) for r in batch["x"].tolist()]
    assert sorted(rows) == _all(4)  # each worker read its own shards, laid out for 2 workers


def test_a_stream_from_a_lambda_is_cached_by_its_rows(make_module: Callable[[str], Any], tmp_path: Path) -> None:
    module = make_module(FLOW)
    dr = fd.Builder().with_modules(module).build()

    def stream(top: int) -> datasets.IterableDataset:  # a lambda does not pickle: keyed by datasets' own hash
        return datasets.IterableDataset.from_generator(lambda: ({"x": i} for i in range(top)))

    first = dr.execute(["x_stats"], inputs={"data": stream(30)}, cache_dir=tmp_path)["x_stats"]
    module.CALLS.clear()
    again = dr.execute(["x_stats"], inputs={"data": stream(30)}, cache_dir=tmp_path)["x_stats"]
    assert module.CALLS == [] and again.mean.item() == first.mean.item() == pytest.approx(14.5)
    other = dr.execute(["x_stats"], inputs={"data": stream(31)}, cache_dir=tmp_path)["x_stats"]
    assert other.mean.item() == pytest.approx(15.0)


# --- other formats, undecoded columns, uneven and unopenable shards, take and skip ----------

TEXT_FLOW = """
from typing import Any
from flowdata import Collect, Parallel

def row(data: Any) -> Parallel[Any]:
    return data

def text(row: Any) -> str:
    return type(row).__name__ + ":" + " ".join(str(row["x"]).split())

def all_text(text: Collect[str]) -> list[str]:
    return list(text)
"""


@pytest.mark.parametrize("kind", ["pandas", "arrow", "numpy"])
def test_a_dataset_in_another_format_gives_its_rows_as_dataset_i_does(
    make_module: Callable[[str], Any], kind: str
) -> None:
    dr = fd.Builder().with_modules(make_module(TEXT_FLOW)).build()
    ds = datasets.Dataset.from_dict({"x": list(range(5)), "y": list(range(5))}).with_format(kind)
    want = [dr.run_sample(["text"], item=ds[i])["text"] for i in range(5)]
    assert dr.execute(["all_text"], inputs={"data": ds})["all_text"] == want  # 5 samples, one per row
    loader = dr.dataloader(["text"], inputs={"data": ds}, batch_size=4)
    assert [t for b in loader for t in b["text"]] == want


def test_files_named_inside_an_undecoded_image_column_are_part_of_the_cache_key(
    make_module: Callable[[str], Any], tmp_path: Path
) -> None:
    module = make_module("""
from typing import Any
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Welford

def row(data: Any) -> Parallel[dict]:
    return data

def nbytes(row: dict) -> float:
    with open(row["image"]["path"], "rb") as f:
        return float(len(f.read()))

@reduce(Welford)
def size_stats(nbytes: Collect[float]) -> Any: ...
""")
    dr = fd.Builder().with_modules(module).build()
    paths = []
    for i in range(4):
        (tmp_path / f"{i}.png").write_bytes(b"x" * 10)
        paths.append(str(tmp_path / f"{i}.png"))

    def make() -> datasets.Dataset:
        return datasets.Dataset.from_dict({"image": paths}).cast_column("image", datasets.Image(decode=False))

    cache = tmp_path / "cache"
    assert dr.execute(["size_stats"], inputs={"data": make()}, cache_dir=cache)["size_stats"].mean.item() == 10
    for p in paths:
        with open(p, "wb") as f:
            f.write(b"x" * 1000)
        os.utime(p, (1e9, 1e9))  # a new size and modification time
    assert dr.execute(["size_stats"], inputs={"data": make()}, cache_dir=cache)["size_stats"].mean.item() == 1000


def _uneven(shards: list[int]) -> Iterator[dict[str, int]]:
    for s in shards:
        yield from ({"x": s * 100 + i} for i in range(3 if s == 0 else 0))


@pytest.mark.procs
def test_an_empty_shard_in_a_pooled_pass_gives_what_inline_gives(dr: fd.Driver) -> None:
    data = datasets.IterableDataset.from_generator(_uneven, gen_kwargs={"shards": [0, 1, 2]})
    inline = dr.execute(["all_x", "x_stats"], inputs={"data": data})
    pooled = dr.execute(["all_x", "x_stats"], inputs={"data": data}, executor=fd.ProcessExecutor(2))
    assert pooled["all_x"] == inline["all_x"] == [0.0, 1.0, 2.0]
    assert pooled["x_stats"].mean.item() == inline["x_stats"].mean.item()


@pytest.mark.procs
def test_a_stream_mapped_by_a_lambda_is_read_here_when_it_cannot_travel(make_module: Callable[[str], Any]) -> None:
    dr = fd.Builder().with_modules(make_module(FLOW.replace(
        "def row(data: Any) -> Parallel[dict]:\n    return data",
        "def row(data: Any) -> Parallel[dict]:\n    return data.map(lambda r: {'x': r['x'] * 2})"))).build()
    for workers in (0, 2):
        loader = dr.dataloader(["centered"], inputs={"data": _stream(4)}, batch_size=4, num_workers=workers)
        assert len(_xs(loader, "centered")) == 4 * ROWS


@pytest.mark.procs
def test_take_and_skip_keep_their_meaning_over_the_whole_stream(dr: fd.Driver) -> None:
    stream = _stream(4)
    want = [float(r["x"]) for r in stream.take(10)]
    assert want == [float(i) for i in range(10)]
    assert dr.execute(["all_x"], inputs={"data": stream.take(10)})["all_x"] == want
    loader = dr.dataloader(["x"], inputs={"data": stream.skip(140)}, batch_size=4, num_workers=2)
    assert sorted(_xs(loader)) == sorted(float(r["x"]) for r in stream.skip(140))


class _BadShards(_Shards):
    def shard(self, num_shards: int, index: int) -> list[dict[str, int]]:
        if index == 1:
            raise FileNotFoundError("part-1.parquet")
        return super().shard(num_shards, index)


def test_a_shard_that_cannot_be_opened_names_the_source_and_the_shard(dr: fd.Driver) -> None:
    with pytest.raises(fd.NodeError, match=r"'row' \(.*:\d+\).*FileNotFoundError: part-1.parquet \(while opening "
                                           r"shard 1 of 2, sample 4294967296 on\)"):
        dr.execute(["all_x"], inputs={"data": _BadShards([[1], [2]])})


# --- streams meeting the statistics pass and resume ------------------------------------------

SIZES = [3, 30, 13, 50]  # rows per shard: however paired in lanes, the lanes end batches apart


class _MappedShards(_Shards):
    """A source in shards that is not a Hugging Face stream, holding a lambda (so it cannot
    be pickled), as a stream with .map(lambda ...) does."""

    def __init__(self, parts: list[list[int]]):
        super().__init__(parts)
        self.fn: Callable[[int], int] = lambda v: v * 2

    def shard(self, num_shards: int, index: int) -> list[dict[str, int]]:
        return [{"x": self.fn(r["x"])} for r in super().shard(num_shards, index)]


def _sharded(kind: str, tmp_path: Path) -> Any:
    """4 shards of SIZES rows each, as ``kind`` gives them (with a lambda: unpicklable)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = [[s * 1000 + i for i in range(n)] for s, n in enumerate(SIZES)]
    if kind == "shards+lambda":
        return _MappedShards(parts)
    if kind.startswith("from_dict"):
        stream = datasets.Dataset.from_dict({"x": [v for p in parts for v in p]}).to_iterable_dataset(num_shards=4)
    else:
        files = []
        for s, part in enumerate(parts):
            files.append(str(tmp_path / f"part-{s}.parquet"))
            pq.write_table(pa.table({"x": part}), files[-1])
        stream = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
    assert stream.num_shards == 4
    if kind.endswith("+map"):
        return stream.map(lambda r: {"x": r["x"] * 2})
    if kind.endswith("+filter"):
        return stream.filter(lambda r: r["x"] % 3 != 0)
    return stream


@pytest.mark.procs
@pytest.mark.parametrize("kind", ["from_dict+map", "parquet+filter", "parquet", "shards+lambda"])
def test_an_unpicklable_stream_gets_its_statistics_with_workers_and_its_epoch_in_the_workers(
    dr: fd.Driver, tmp_path: Path, kind: str
) -> None:
    # stream.map(lambda ...) with a statistics pass on 2 workers was a FlowdataError
    # "... cannot be sent to worker processes: PicklingError": its shards are read here.
    data = _sharded(kind, tmp_path)
    inline = dr.dataloader(["centered"], inputs={"data": data}, batch_size=4)
    pooled = dr.dataloader(["centered"], inputs={"data": data}, batch_size=4, num_workers=2)
    for field in ("mean", "var", "count"):  # the same bits as in one process
        assert getattr(pooled.stats["x_stats"], field).tolist() == getattr(inline.stats["x_stats"], field).tolist()
    assert sorted(_xs(pooled, "centered")) == sorted(_xs(inline, "centered"))
    assert len(_xs(pooled, "centered")) == pooled.stats["x_stats"].count.item() == (
        sum(1 for r in data if r["x"] % 3 != 0) if kind.endswith("filter") else sum(SIZES))


def _batches(loader: Any, cuts: tuple[int, ...] | None = ()) -> tuple[list[list[float]], dict[int, Any]]:
    """The epoch's batches, and ``state_dict()`` after each of ``cuts`` batches (None: every one)."""
    out: list[list[float]] = []
    states = {}
    for b in loader:
        out.append(b["centered"].tolist())
        if cuts is None or len(out) in cuts:
            states[len(out)] = loader.state_dict()
    return out, states


@pytest.mark.procs
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("kind", ["from_dict+map", "parquet+filter", "parquet", "shards+lambda"])
def test_a_stream_in_shards_resumed_at_the_same_worker_count_continues_in_the_uninterrupted_order(
    dr: fd.Driver, tmp_path: Path, kind: str, shuffle: bool
) -> None:
    # 4 shards, 2 workers, state_dict() after 7 batches, a new loader with 2 workers: the
    # remaining batches were the right ones in another order (the other worker served first).
    data = _sharded(kind, tmp_path)
    args: dict[str, Any] = dict(inputs={"data": data}, batch_size=4, shuffle=shuffle, shuffle_buffer=8, seed=5)
    full, states = _batches(dr.dataloader(["centered"], num_workers=2, **args), None)
    # Cut early, in the middle, and where the shorter lane has ended (then one lane serves alone).
    ended = 2 * min(states[len(full)]["lane_batches"].values())
    cuts = sorted({1, 7, ended, ended + 1} & set(range(1, len(full))))
    assert 7 in cuts and (kind.startswith("from_dict") or ended + 1 in cuts)
    for cut in cuts:
        again = dr.dataloader(["centered"], num_workers=2, **args)
        again.load_state_dict(states[cut])
        rest, _ = _batches(again)
        assert full[:cut] + rest == full, f"resumed after {cut} batches"  # element by element
    # 0 workers, or more workers than lanes: the same order too; the next epoch is laid out anew.
    for workers in (0, 3) if kind in ("parquet", "shards+lambda") else ():
        again = dr.dataloader(["centered"], num_workers=workers, **args)
        again.load_state_dict(states[7])
        rest, _ = _batches(again)
        assert full[:7] + rest == full, f"resumed with {workers} workers"


@pytest.mark.procs
def test_a_resumed_stream_saved_again_continues_in_the_uninterrupted_order(dr: fd.Driver) -> None:
    data = datasets.Dataset.from_dict({"x": list(range(70))}).to_iterable_dataset(num_shards=4)
    args: dict[str, Any] = dict(inputs={"data": data}, batch_size=4, shuffle=True, shuffle_buffer=8, seed=1,
                                num_workers=2)
    full, states = _batches(dr.dataloader(["centered"], **args), (3,))
    again = dr.dataloader(["centered"], **args)
    again.load_state_dict(states[3])
    assert again.state_dict()["last_lane"] == states[3]["last_lane"]  # saved before a batch came
    it = iter(again)
    more = [next(it)["centered"].tolist() for _ in range(4)]
    state = again.state_dict()
    del it
    last = dr.dataloader(["centered"], **args)
    last.load_state_dict(state)
    rest, _ = _batches(last)
    assert full[:3] + more + rest == full


@pytest.mark.procs
def test_a_stream_position_naming_a_lane_that_served_nothing_is_refused(dr: fd.Driver) -> None:
    data = _stream(2)
    _, state = _run(dr, data, 2, stop=1)
    assert set(state["lane_batches"]) == {str(state["last_lane"])}
    state["last_lane"] = 1 - state["last_lane"]
    loader = dr.dataloader(["x"], inputs={"data": data}, batch_size=6, shuffle=True, shuffle_buffer=20, seed=7)
    with pytest.raises(fd.FlowdataError, match=r"cannot resume: the saved position of the stream in shards.*the "
                                               r"last batch came from lane \d, which served none"):
        loader.load_state_dict(state)


@pytest.mark.procs
def test_an_unpicklable_stream_under_spawned_workers_is_an_error_naming_it_and_the_fix(
    dr: fd.Driver, tmp_path: Path
) -> None:
    # Spawned workers receive the dataset pickled: torch raised a bare PicklingError.
    loader = dr.dataloader(["x"], inputs={"data": _sharded("from_dict+map", tmp_path)}, batch_size=4,
                           num_workers=2, multiprocessing_context="spawn")
    with pytest.raises(fd.FlowdataError, match=r"(?s)the loader's dataset cannot be sent to its 2 DataLoader "
                                               r"workers, started by 'spawn': source 'row' returned a "
                                               r"IterableDataset that cannot be pickled: .*lambda.*"
                                               r"fix: give the stream's map\(\) and filter\(\) module-level "
                                               r"functions.*multiprocessing_context='fork'.*num_workers=0"):
        next(iter(loader))
