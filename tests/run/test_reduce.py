"""@reduce through execute(): one shared pass, folds in workers, bitwise-identical results,
automatic passes, build-time checks, the pass cache, and a reducer that refuses its options."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import torch

import flowdata as fd
from flowdata.run.kernel import ChunkResult
from flowdata.stats import Welford

T = TypeVar("T")
R = TypeVar("R")

FLOW = """
import torch
from flowdata import Collect, Parallel, Sequential, reduce
from flowdata.stats import Count, Histogram, HistogramCounts, Stats, Vocab, Vocabulary, Welford

CALLS = {"feature": 0, "label": 0, "normalized": 0}

def row(n: int) -> Parallel[int]:
    yield from range(n)

def feature(row: int) -> torch.Tensor:
    CALLS["feature"] += 1
    g = torch.Generator().manual_seed(row)
    return 1e4 + torch.randn(4, 6, generator=g, dtype=torch.float64)

def label(row: int) -> str:
    CALLS["label"] += 1
    return "xyz"[row % 3]

@reduce(Welford, dim=(0, 2))
def feature_stats(feature: Collect[torch.Tensor]) -> Stats:
    raise AssertionError("the body of a reduction is not called")

@reduce(Vocabulary)
def label_vocab(label: Collect[str]) -> Vocab: ...

@reduce(Count)
def n_rows(row: Collect[int]) -> int: ...

@reduce(Histogram)
def row_hist(row: Collect[int], edges: list[float]) -> HistogramCounts: ...

def first_labels(label: Collect[str]) -> list[str]:
    return [x for _, x in zip(range(5), label)]

def normalized(feature: torch.Tensor, feature_stats: Stats) -> torch.Tensor:
    CALLS["normalized"] += 1
    return (feature - feature_stats.mean[:, None]) / feature_stats.std[:, None]

@reduce(Welford, dim=(0, 2))
def normalized_stats(normalized: Collect[torch.Tensor]) -> Stats: ...

def tick(n: int) -> Sequential[int]:
    yield from range(n)

def tick_feature(tick: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(tick)
    return 1e4 + torch.randn(4, 6, generator=g, dtype=torch.float64)

@reduce(Welford, dim=(0, 2))
def tick_stats(tick_feature: Collect[torch.Tensor]) -> Stats: ...
"""

ALL = ["feature_stats", "label_vocab", "n_rows", "row_hist", "first_labels"]
INPUTS = {"n": 300, "edges": [0.0, 100.0, 250.0, 300.0]}


@pytest.fixture
def flow(make_module: Callable[[str], Any]) -> tuple[fd.Driver, Any]:
    module = make_module(FLOW)
    return fd.Builder().with_modules(module).build(), module


def _equal(a: fd.stats.Stats, b: fd.stats.Stats) -> bool:  # type: ignore[name-defined]
    return all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("mean", "std", "var", "min", "max", "count"))


def test_one_pass_feeds_every_reduction_and_collect(flow: tuple[fd.Driver, Any]) -> None:
    dr, module = flow
    out = dr.execute(ALL, inputs=INPUTS)
    assert module.CALLS == {"feature": 300, "label": 300, "normalized": 0}
    assert out["n_rows"] == 300
    assert out["label_vocab"].tokens == ("x", "y", "z") and out["label_vocab"].counts == (100, 100, 100)
    assert out["row_hist"].counts.tolist() == [100, 150, 50]
    assert out["first_labels"] == ["x", "y", "z", "x", "y"]
    stats = out["feature_stats"]
    assert stats.mean.shape == (4,) and stats.count.tolist() == [1800] * 4


def test_statistics_match_a_float64_reference(flow: tuple[fd.Driver, Any]) -> None:
    dr, module = flow
    stats = dr.execute(["feature_stats"], inputs={"n": 200})["feature_stats"]
    data = torch.stack([module.feature(i) for i in range(200)])  # [200, 4, 6]
    ref = data.permute(1, 0, 2).reshape(4, -1)
    assert torch.allclose(stats.mean, ref.mean(1), rtol=1e-12, atol=0)
    assert torch.allclose(stats.std, ref.std(1, unbiased=False), rtol=1e-9, atol=0)


@pytest.mark.procs
def test_bitwise_identical_for_any_number_of_workers(flow: tuple[fd.Driver, Any]) -> None:
    dr, _ = flow
    outputs = ["feature_stats", "normalized_stats"]
    base = dr.execute(outputs, inputs=INPUTS)
    for workers in (1, 2, 4):
        with fd.ProcessExecutor(num_workers=workers) as ex:
            got = dr.execute(outputs, inputs=INPUTS, executor=ex)
        assert _equal(got["feature_stats"], base["feature_stats"]), workers
        assert _equal(got["normalized_stats"], base["normalized_stats"]), workers
    for chunk_size in (1, 7, 64, 100):
        got = dr.execute(outputs, inputs=INPUTS, chunk_size=chunk_size)
        assert _equal(got["feature_stats"], base["feature_stats"]), chunk_size
    # A Sequential source over the same values folds the same blocks: the same bits.
    seq = dr.execute(["tick_stats"], inputs={"n": 300})["tick_stats"]
    assert _equal(seq, base["feature_stats"])


class InspectingExecutor:
    """Runs tasks inline and keeps what came back from each chunk."""

    def __init__(self) -> None:
        self.results: list[ChunkResult] = []

    def map(self, fn: Callable[[Any, T], R], tasks: Iterable[T], *, context: Any) -> Iterator[R]:
        for task in tasks:
            result = fn(context, task)
            self.results.append(result)  # type: ignore[arg-type]
            yield result


def test_workers_ship_reducer_states_not_values(flow: tuple[fd.Driver, Any]) -> None:
    dr, _ = flow
    ex = InspectingExecutor()
    dr.execute(["feature_stats"], inputs={"n": 1000}, executor=ex)
    assert ex.results
    blocks: list[int] = []
    loose: list[int] = []
    for r in ex.results:
        assert "feature" not in r.columns  # no per-sample values travel back as columns
        for kind, at, x in r.pieces["feature_stats"]:
            if kind == "block":
                assert type(x).__name__ == "Welford"
                blocks.append(at)
            else:
                assert kind == "value"
                loose.append(at)
    # Chunks start at one sample and grow: the first block arrives in pieces, folded in
    # this process; once chunks are a block long they are block-aligned and every whole
    # block is folded where it was computed. Only the last, partial block travels too.
    assert blocks == list(range(1, 1000 // 64))
    assert loose == [*range(64), *range(1000 // 64 * 64, 1000)]


def test_pass_two_runs_after_pass_one_automatically(flow: tuple[fd.Driver, Any]) -> None:
    dr, module = flow
    out = dr.execute(["normalized_stats"], inputs={"n": 128})
    assert torch.allclose(out["normalized_stats"].mean, torch.zeros(4, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(out["normalized_stats"].std, torch.ones(4, dtype=torch.float64), atol=1e-9)
    assert module.CALLS == {"feature": 256, "label": 0, "normalized": 128}
    assert [p.number for p in dr.plan(["normalized_stats"]).group("row").passes] == [1, 2]


def test_reducer_result_type_checked_at_build(build: Callable[..., fd.Driver]) -> None:
    with pytest.raises(fd.GraphError, match=r"FD301 reducer-result-mismatch: 'stats' returns float, but its reducer Welford.result\(\) gives flowdata\.stats\.Stats"):
        build("""
        from flowdata import Collect, Parallel, reduce
        from flowdata.stats import Welford
        def x(n: int) -> Parallel[float]:
            yield from range(n)
        @reduce(Welford)
        def stats(x: Collect[float]) -> float: ...
        """)


def test_reduction_needs_exactly_one_collect(build: Callable[..., fd.Driver]) -> None:
    with pytest.raises(fd.GraphError, match=r"FD302 reduce-needs-one-collect: 'both' is declared @reduce\(Count\) but has 2 Collect parameters"):
        build("""
        from flowdata import Collect, Parallel, reduce
        from flowdata.stats import Count
        def x(n: int) -> Parallel[int]:
            yield from range(n)
        def y(x: int) -> int:
            return x
        @reduce(Count)
        def both(x: Collect[int], y: Collect[int]) -> int: ...
        """)


def test_reduce_rejects_a_non_class() -> None:
    with pytest.raises(TypeError, match=r"@reduce expects a reducer class such as Welford"):
        fd.reduce(lambda: None)  # type: ignore[arg-type]


@pytest.mark.procs
def test_fold_error_names_the_reduction_and_samples(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    import numpy as np
    from flowdata import Collect, Parallel, reduce
    from flowdata.stats import Stats, Welford
    def x(n: int) -> Parallel[int]:
        yield from range(n)
    def vec(x: int) -> np.ndarray:
        return np.zeros(3 if x < 70 else 4)
    @reduce(Welford, dim=0)
    def stats(vec: Collect[np.ndarray]) -> Stats: ...
    """)
    with pytest.raises(fd.SampleError, match=r"node 'stats' \(.*:9\) failed on sample 70 of group 'x' \(pass 1, worker main\): StatsError: Welford\(dim=\(0,\)\) expected values whose kept shape is \(3,\), got \(4,\)(.|\n)*fix: see the value of 'vec' it was given with driver.run_sample\(\['vec'\], index=70"):
        dr.execute(["stats"], inputs={"n": 200})
    with pytest.raises(fd.SampleError, match=r"failed on sample 70 of group 'x' \(pass 1, worker (main|pid \d+)\)"):
        dr.execute(["stats"], inputs={"n": 200}, executor="processes")


# --- the pass cache ---------------------------------------------------------------------------

CACHED = """
from pathlib import Path
import numpy as np
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford
CALLS = [0]
def path(folder: str) -> Parallel[str]:
    yield from sorted(str(p) for p in Path(folder).glob("*.txt"))
def value(path: str, scale: float) -> float:
    CALLS[0] += 1
    return float(Path(path).read_text()) * scale
@reduce(Welford)
def stats(value: Collect[float]) -> Stats: ...
"""


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    for i in range(100):
        (folder / f"{i:03d}.txt").write_text(str(i))
    return folder


def _run(dr: fd.Driver, folder: Path, cache: Path, scale: float = 1.0) -> Any:
    return dr.execute(["stats"], inputs={"folder": str(folder), "scale": scale}, cache_dir=cache)["stats"]


def test_second_run_skips_the_pass_and_says_so(make_module: Callable[[str], Any], data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    module = make_module(CACHED)
    dr = fd.Builder().with_modules(module).build()
    cache = tmp_path / "cache"
    with caplog.at_level(logging.INFO, logger="flowdata"):
        first = _run(dr, data_dir, cache)
        assert module.CALLS == [100]
        second = _run(dr, data_dir, cache)
    assert module.CALLS == [100]  # nothing recomputed
    assert _equal(first, second)
    assert any("pass 1 of group 'path' skipped: stats loaded from the cache" in r.getMessage() for r in caplog.records)
    files = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert "manifest.json" in files and all(f.endswith((".npz", ".json")) for f in files)


def test_any_change_of_key_recomputes(make_module: Callable[[str], Any], data_dir: Path, tmp_path: Path) -> None:
    module = make_module(CACHED)
    dr = fd.Builder().with_modules(module).build()
    cache = tmp_path / "cache"
    base = _run(dr, data_dir, cache)
    assert module.CALLS == [100]
    _run(dr, data_dir, cache, scale=2.0)  # an input changed
    assert module.CALLS == [200]
    target = data_dir / "050.txt"
    target.write_text("5000")  # a file changed: size and mtime
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    changed = _run(dr, data_dir, cache)
    assert module.CALLS == [300] and not _equal(changed, base)
    (data_dir / "new.txt").write_text("1")  # an item added
    _run(dr, data_dir, cache)
    assert module.CALLS == [401]
    edited = make_module(CACHED.replace("* scale", "* scale + 0.0"))  # the code changed
    dr2 = fd.Builder().with_modules(edited).build()
    _run(dr2, data_dir, cache)
    assert edited.CALLS == [101]
    configured = fd.Builder().with_modules(module).with_config({"unrelated": 1}).build()
    _run(configured, data_dir, cache)  # the config changed
    assert module.CALLS == [502]


@pytest.mark.parametrize("damage", ["truncate-npz", "garble-manifest", "delete-npz"])
def test_corrupt_cache_is_reported_and_recomputed(
    make_module: Callable[[str], Any], data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    module = make_module(CACHED)
    dr = fd.Builder().with_modules(module).build()
    cache = tmp_path / "cache"
    first = _run(dr, data_dir, cache)
    npz = next(cache.rglob("*.npz"))
    if damage == "truncate-npz":
        npz.write_bytes(npz.read_bytes()[:40])
    elif damage == "garble-manifest":
        (npz.parent / "manifest.json").write_text("{not json")
    else:
        npz.unlink()
    with caplog.at_level(logging.WARNING, logger="flowdata.cache"):
        again = _run(dr, data_dir, cache)
    assert module.CALLS == [200]
    assert _equal(first, again)
    assert any("is unreadable" in r.getMessage() and "recomputing" in r.getMessage() for r in caplog.records)
    _run(dr, data_dir, cache)  # the rewritten entry is used again
    assert module.CALLS == [200]


def test_cache_never_unpickles(make_module: Callable[[str], Any], data_dir: Path, tmp_path: Path) -> None:
    import numpy as np

    module = make_module(CACHED)
    dr = fd.Builder().with_modules(module).build()
    cache = tmp_path / "cache"
    _run(dr, data_dir, cache)
    npz = next(cache.rglob("*.npz"))
    with np.load(npz, allow_pickle=False) as data:
        assert all(data[k].dtype != object for k in data.files)


@pytest.mark.procs
def test_reductions_in_a_group_closed_by_a_source(build: Callable[..., fd.Driver]) -> None:
    dr = build("""
    from flowdata import Collect, Parallel, reduce
    from flowdata.stats import Count, Vocab, Vocabulary
    def sentence(texts: list[str]) -> Parallel[str]:
        yield from texts
    def words(sentence: str) -> list[str]:
        return sentence.split()
    @reduce(Vocabulary)
    def vocab(words: Collect[list[str]]) -> Vocab: ...
    @reduce(Count)
    def n_sentences(sentence: Collect[str]) -> int: ...
    def word(words: Collect[list[str]]) -> Parallel[str]:
        for ws in words:
            yield from ws
    def word_id(word: str, vocab: Vocab) -> int:
        return vocab[word]
    @reduce(Count)
    def n_words(word_id: Collect[int]) -> int: ...
    def ids(word_id: Collect[int]) -> list[int]:
        return list(word_id)
    """)
    texts = ["a b a", "c a", "b"]
    out = dr.execute(["vocab", "n_sentences", "n_words", "ids"], inputs={"texts": texts})
    assert out["vocab"].tokens == ("a", "b", "c")
    assert (out["n_sentences"], out["n_words"], out["ids"]) == (3, 6, [0, 1, 0, 2, 0, 1])
    assert dr.execute(["n_words"], inputs={"texts": texts}, executor="processes") == {"n_words": 6}


ONE_DIM = """
import numpy as np
import torch
from flowdata import Collect, Parallel, reduce
from flowdata.stats import MinMax, Range, Stats, Welford

def x(n: int) -> Parallel[int]:
    yield from range(n)

def vec(x: int) -> np.ndarray:
    return np.array([x, 10.0 * x, -x + 3.0])

def image(x: int) -> torch.Tensor:
    return torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4) * (x + 1)

@reduce(Welford, dim=0)
def vec_stats(vec: Collect[np.ndarray]) -> Stats: ...

@reduce(Welford, dim=(0, 2, 3))
def channel_stats(image: Collect[torch.Tensor]) -> Stats: ...

@reduce(MinMax, dim=0)
def vec_range(vec: Collect[np.ndarray]) -> Range: ...

def centred(vec: np.ndarray, vec_stats: Stats) -> np.ndarray:
    return (vec - vec_stats.mean.numpy()) / vec_stats.std.numpy()

def centred_mean(centred: Collect[np.ndarray]) -> list[float]:
    return np.mean(np.stack(list(centred)), axis=0).tolist()
"""


def test_dim_names_axes_of_the_stacked_batch(build: Callable[..., fd.Driver]) -> None:
    dr = build(ONE_DIM)
    out = dr.execute(["vec_stats", "channel_stats", "vec_range", "centred_mean"], inputs={"n": 50})
    vecs = np.stack([np.array([x, 10.0 * x, -x + 3.0]) for x in range(50)])
    images = torch.stack([torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) * (x + 1) for x in range(50)])
    direct = Welford(dim=0)
    direct.update(vecs)  # the same dim, used directly on the batch
    assert torch.equal(out["vec_stats"].mean, direct.result().mean) and out["vec_stats"].mean.shape == (3,)
    assert np.allclose(out["vec_stats"].mean.numpy(), vecs.mean(axis=0))
    assert np.allclose(out["centred_mean"], 0.0)  # normalising by it centres every feature
    assert torch.allclose(out["channel_stats"].mean, images.double().mean(dim=(0, 2, 3)))
    assert out["vec_range"].min.tolist() == vecs.min(axis=0).tolist()


def test_a_reduction_whose_dim_keeps_the_sample_axis(build: Callable[..., fd.Driver]) -> None:
    with pytest.raises(fd.GraphError, match=r"FD303 reduce-keeps-samples: 'stats' is declared @reduce\(Welford, dim=1\), which keeps the sample axis(.|\n)*fix: add 0 \(dim=\(0, 1\)\); per-feature statistics of \[F\] vectors are dim=0, per-channel statistics of \[C, H, W\] images dim=\(0, 2, 3\)"):
        build("""
        import numpy as np
        from flowdata import Collect, Parallel, reduce
        from flowdata.stats import Stats, Welford
        def x(n: int) -> Parallel[int]:
            yield from range(n)
        def vec(x: int) -> np.ndarray:
            return np.zeros(3)
        @reduce(Welford, dim=1)
        def stats(vec: Collect[np.ndarray]) -> Stats: ...
        """)


# --- a reducer that refuses its options ---------------------------------------------------


REDUCER = """
from flowdata import Collect, Parallel, reduce

class Scaled:
    def __init__(self, scale: float):
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.scale, self.total = scale, 0.0
    def update(self, v):
        self.total += v * self.scale
    def merge(self, other):
        self.total += other.total
        return self
    def result(self) -> float:
        return self.total

def x(n: int) -> Parallel[float]:
    yield from (float(i) for i in range(n))

@reduce(Scaled)
def scaled(x: Collect[float], scale: float) -> float: ...
"""


def test_a_reducer_that_refuses_its_options_names_the_node(build: Callable[..., fd.Driver]) -> None:
    dr = build(REDUCER)
    assert dr.execute(["scaled"], inputs={"n": 4, "scale": 2.0}) == {"scaled": 12.0}
    with pytest.raises(fd.NodeError, match=r"node 'scaled' \(.*:20\) failed: ValueError: scale must be positive, got -1.0"):
        dr.execute(["scaled"], inputs={"n": 4, "scale": -1.0})
