"""Reducers: accuracy, merging, NaN and shape policies, state round trips, the contract."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch

from flowdata.reduce import Reducer
from flowdata.stats import Count, Histogram, MinMax, Stats, StatsError, Vocab, Vocabulary, Welford


def _stats(w: Welford) -> Stats:
    return w.result()


def test_sum_of_squares_trap_gives_the_exact_std() -> None:
    w = Welford()
    w.update(np.array([10000.0, 10001.0, 10002.0]))
    s = w.result()
    assert float(s.var) == 2.0 / 3.0
    assert float(s.std) == np.sqrt(2.0 / 3.0)
    # The naive formula the bug report used gives 0 here in float32:
    x = np.array([10000.0, 10001.0, 10002.0], dtype=np.float32)
    assert float(np.mean(x * x) - np.mean(x) ** 2) != pytest.approx(2.0 / 3.0)


def test_large_offset_matches_two_pass_reference() -> None:
    rng = np.random.default_rng(0)
    x = 1e8 + rng.standard_normal(200_000)
    w = Welford()
    for batch in np.array_split(x, 97):
        w.update(batch)
    s = w.result()
    ref_mean = x.mean()
    ref_std = np.sqrt(np.mean((x - ref_mean) ** 2))
    assert abs(float(s.mean) / ref_mean - 1) < 1e-9
    assert abs(float(s.std) / ref_std - 1) < 1e-9
    assert int(s.count) == x.size and float(s.min) == x.min() and float(s.max) == x.max()


@pytest.mark.parametrize("split", [[1], [3, 7], [50, 51, 52], [199]])
def test_merge_in_any_grouping_equals_one_stream(split: list[int]) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 4)) * 3 + 7
    whole = Welford(dim=0)
    whole.update(x)
    parts = [Welford(dim=0) for _ in range(len(split) + 1)]
    for p, chunk in zip(parts, np.split(x, split), strict=True):
        p.update(chunk)
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    a, b = whole.result(), merged.result()
    for k in ("mean", "std", "var"):
        assert torch.allclose(getattr(a, k), getattr(b, k), rtol=1e-12, atol=0)
    assert torch.equal(a.min, b.min) and torch.equal(a.max, b.max) and torch.equal(a.count, b.count)


def test_per_channel_nchw_and_dtypes() -> None:
    images = torch.randint(0, 256, (8, 3, 5, 5), dtype=torch.uint8)
    w = Welford(dim=(0, 2, 3))
    w.update(images)
    w.update(images.numpy().astype(np.int16))
    s = w.result()
    ref = images.double().permute(1, 0, 2, 3).reshape(3, -1)
    assert s.mean.shape == (3,) and s.mean.dtype == torch.float64
    assert torch.allclose(s.mean, ref.mean(1), rtol=1e-12)
    assert torch.allclose(s.std, ref.std(1, unbiased=False), rtol=1e-12)
    assert s.count.tolist() == [8 * 25 * 2] * 3
    half = Welford(dim=0)
    half.update(torch.ones(4, 2, dtype=torch.bfloat16))
    assert half.result().mean.tolist() == [1.0, 1.0]


def test_ddof_and_elementwise_dim() -> None:
    w = Welford(dim=(), ddof=1)
    for v in ([1.0, 10.0], [3.0, 10.0]):
        w.update(np.array(v))
    s = w.result()
    assert s.var.tolist() == [2.0, 0.0] and s.count.tolist() == [2, 2]


def test_empty_batches_are_no_ops() -> None:
    w = Welford(dim=0)
    w.update(np.zeros((0, 3)))
    w.update(np.array([[1.0, 2.0, 3.0]]))
    w.update(np.zeros((0, 3)))
    assert w.result().mean.tolist() == [1.0, 2.0, 3.0]
    empty = Welford().result()
    assert torch.isnan(empty.mean) and int(empty.count) == 0


def test_nan_policies() -> None:
    data = np.array([[1.0, np.nan], [3.0, 4.0]])
    prop = Welford(dim=0)
    prop.update(data)
    assert torch.isnan(prop.result().mean[1]) and prop.result().mean[0] == 2.0
    ign = Welford(dim=0, nan="ignore")
    ign.update(data)
    s = ign.result()
    assert s.mean.tolist() == [2.0, 4.0] and s.count.tolist() == [2, 1] and s.min.tolist() == [1.0, 4.0]
    strict = Welford(dim=0, nan="raise")
    with pytest.raises(StatsError, match=r"Welford\(nan='raise'\) received 1 NaN value\(s\) in a batch of shape \(2, 2\)"):
        strict.update(data)
    with pytest.raises(StatsError, match=r"expected 'propagate', 'ignore' or 'raise'"):
        Welford(nan="skip")  # type: ignore[arg-type]


def test_shape_change_is_a_clear_error() -> None:
    w = Welford(dim=0)
    w.update(np.zeros((4, 64)))
    with pytest.raises(StatsError, match=r"expected values whose kept shape is \(64,\), got \(32,\) \(from a value of shape \(4, 32\)\)"):
        w.update(np.zeros((4, 32)))
    with pytest.raises(StatsError, match=r"cannot reduce axis 2 of a value with 2 axes"):
        Welford(dim=2).update(np.zeros((2, 2)))


def test_fold_of_a_block_equals_its_stacked_batch() -> None:
    values = [np.arange(6.0).reshape(2, 3) + i for i in range(5)]
    a = Welford(dim=(0, 2))  # one meaning of dim: axes of the stacked batch, 0 = the samples
    a.fold(values)
    b = Welford(dim=(0, 2))
    b.update(np.stack(values))
    assert torch.equal(a.result().mean, b.result().mean) and torch.equal(a.result().var, b.result().var)


def test_vocabulary_order_and_limits() -> None:
    v = Vocabulary()
    for tok in ["b", "a", "c", "a", "b", "d"]:
        v.update(tok)
    assert v.result() == Vocab(("a", "b", "c", "d"), (2, 2, 1, 1))
    other = Vocabulary()
    other.update(["d", "d", "e"])
    v.merge(other)
    vocab = v.result()
    assert vocab.tokens == ("d", "a", "b", "c", "e") and vocab["a"] == 1 and "e" in vocab and len(vocab) == 5
    assert vocab.get("zzz") == -1
    with pytest.raises(KeyError, match=r"token 'zzz' is not in the vocabulary of 5 tokens"):
        vocab["zzz"]
    limited = Vocabulary(min_count=2, max_size=2)
    limited.merge(v)
    assert limited.result().tokens == ("d", "a")
    ints = Vocabulary()
    for label in [3, 1, 3, np.int64(2)]:
        ints.update(label)
    assert ints.result().tokens == (3, 1, 2)


def test_count_minmax_histogram() -> None:
    c = Count()
    c.fold([1, 2, 3])
    c.update("x")
    assert c.result() == 4
    m = MinMax(dim=0)
    m.update(np.array([[1.0, 5.0], [-2.0, 3.0]]))
    r = m.result()
    assert r.min.tolist() == [-2.0, 3.0] and r.max.tolist() == [1.0, 5.0]
    h = Histogram([0.0, 1.0, 2.0])
    h.update(np.array([0.5, 1.0, 2.0, -1.0, 3.0, np.nan]))
    res = h.result()
    assert res.counts.tolist() == [1, 2] and (res.below, res.above, res.nan) == (1, 1, 1)
    with pytest.raises(StatsError, match=r"Histogram edges must be at least two increasing numbers"):
        Histogram([1.0, 0.0])


class SumOfAbs:
    """Test double of the reducer contract, as a user would write one."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.total = 0.0

    def update(self, value: float) -> None:
        self.total += abs(value) * self.scale

    def merge(self, other: SumOfAbs) -> SumOfAbs:
        self.total += other.total
        return self

    def result(self) -> float:
        return self.total

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"total": np.array(self.total), "scale": np.array(self.scale)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> SumOfAbs:
        r = cls(float(state["scale"]))
        r.total = float(state["total"])
        return r


def _filled() -> list[Any]:
    w = Welford(dim=0, ddof=1, nan="ignore")
    w.update(np.array([[1.0, np.nan], [2.0, 5.0]]))
    v = Vocabulary(min_count=1, max_size=10)
    v.update(["x", "y", "x"])
    c = Count()
    c.fold([0] * 7)
    m = MinMax()
    m.update(np.array([3.0, -1.0]))
    h = Histogram([0, 1, 2])
    h.update(np.array([0.1, 1.5]))
    s = SumOfAbs(2.0)
    s.update(-3.0)
    return [w, v, c, m, h, s]


def _same(a: Any, b: Any) -> bool:
    ra, rb = a.result(), b.result()
    if isinstance(ra, Stats):
        return all(torch.equal(getattr(ra, k), getattr(rb, k)) or (torch.isnan(getattr(ra, k)).any() and torch.equal(torch.nan_to_num(getattr(ra, k)), torch.nan_to_num(getattr(rb, k)))) for k in ("mean", "std", "var", "min", "max", "count"))
    if hasattr(ra, "__dataclass_fields__"):
        return all(
            torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
            for x, y in ((getattr(ra, f), getattr(rb, f)) for f in ra.__dataclass_fields__)
        )
    return bool(ra == rb)


@pytest.mark.parametrize("reducer", _filled(), ids=lambda r: type(r).__name__)
def test_every_reducer_round_trips_state_and_pickle(reducer: Any, tmp_path: Any) -> None:
    assert isinstance(reducer, Reducer)
    state = reducer.state_dict()
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in state.values())
    path = tmp_path / "state.npz"
    np.savez(path, **state)
    with np.load(path, allow_pickle=False) as npz:
        restored = type(reducer).from_state_dict({k: npz[k] for k in npz.files})
    assert _same(reducer, restored)
    assert _same(reducer, pickle.loads(pickle.dumps(reducer)))
    result = reducer.result()
    back = pickle.loads(pickle.dumps(result))  # results travel to workers as whole values
    assert type(back) is type(result) and repr(back) == repr(result)
    # A restored reducer keeps accumulating.
    restored.merge(type(reducer).from_state_dict(state))
    assert restored.state_dict().keys() == state.keys()


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_update_never_writes_into_the_callers_array(dtype: Any) -> None:
    x = (np.arange(12).reshape(4, 3) * 3 + 1).astype(dtype)
    before = x.copy()
    w = Welford(dim=0)
    w.update(x)
    w.update(x)
    assert np.array_equal(x, before)
    assert w.result().mean.tolist() == before.astype(np.float64).mean(0).tolist()
    back = pickle.loads(pickle.dumps(w))  # the scratch buffer is not state
    assert "_scratch" not in back.__dict__ and _same(w, back)
