"""Welford: streaming mean, variance, min and max, mergeable by Chan's formula.

``dim`` has one meaning everywhere: axes of a *batch* of values stacked along a new axis 0,
the sample axis -- what ``torch.stack(values).mean(dim)`` reduces. ``Welford(dim).update(
batch)`` reduces a batch you stacked; ``@reduce(Welford, dim=...)`` (:meth:`Welford.fold`)
stacks each block of samples itself, so ``dim`` must include axis 0 there: per-feature
statistics of ``[F]`` vectors are ``dim=0``, per-channel statistics of ``[C, H, W]``
images ``dim=(0, 2, 3)``, and ``dim=None`` reduces everything.

Every update reduces a batch over the axes in ``dim`` using the batch's own mean and sum
of squared deviations (M2), never sums of squares, and merges it into the running state
with Chan et al.'s parallel formula, all in float64. So ``[10000, 10001, 10002]`` gives the
exact standard deviation, where ``E[x^2] - E[x]^2`` returns 0 or garbage.

The values are accumulated about a *shift*, one value per kept position: the mean and M2
held are those of ``x - shift``. Without it, each batch's mean carries a rounding error of
about one ulp of the values (1.2e-7 around 1e9, 0.125 around 1e15), which enters the
variance squared and, through Chan's merge, times the spread between batches: a relative
error near 1e-8 around 1e9 and 1e-3 around 1e15 for a spread of 1. Shifted by a value of
the data, the numbers are small and exact (Sterbenz), and so are their means; the variance
of ``1e15 + [-1, 1]`` values is right to float64 rounding.

The rule that picks the shift depends on the values alone, so results stay bitwise
identical whatever the chunking, worker count or ranks (the folding order is fixed, see
:mod:`flowdata.run.folding`): a position's shift is chosen when it receives its first
values -- the first of them in sample order (C order over the reduced axes; with
``nan="ignore"`` the first that is not NaN), or 0 when that value is not finite (then the
mean is inf or NaN anyway) -- and never changes after. A fresh reducer that merges another
takes the other's shift for the positions it had no values of; otherwise the other's mean
is moved to this shift (``mean + (other_shift - shift)``: a difference of two values of the
data, exact when they are within a factor of two), then merged by Chan's formula. So the
shift of a reduction's result is the first value of each position in sample order, however
its blocks were folded. Minimum and maximum are kept on the raw values, exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from flowdata.columns import Stacked
from flowdata.errors import StatsError

if TYPE_CHECKING:
    import torch

__all__ = ["Stats", "Welford", "StatsError", "as_float64"]

NanPolicy = Literal["propagate", "ignore", "raise"]

_STACK_ELEMENTS = 1 << 17  # values stacked per batch in fold(): about 1 MB of float64
_SCRATCH_BYTES = 16 << 20  # largest float64 scratch buffer a Welford keeps between updates


@dataclass(frozen=True)
class Stats:
    """What :class:`Welford` computes, as float64 tensors of the kept shape.

    Attributes:
        mean: Mean (``shift + offset`` rounded to float64).
        std: Standard deviation (``sqrt(var)``).
        var: Variance with the reducer's ``ddof``.
        min: Minimum.
        max: Maximum.
        count: Number of values folded (per position when NaNs are ignored), int64.
        shift: The value each position was accumulated about (its first value in sample
            order, see :class:`Welford`); None in a ``Stats`` made by hand.
        offset: The mean minus ``shift``, exact to float64 rounding of the spread: around
            1e15 a float64 is a multiple of 0.125, so ``mean`` alone can be 0.06 off, where
            ``(x - shift) - offset`` is not. None in a ``Stats`` made by hand.
    """

    mean: torch.Tensor
    std: torch.Tensor
    var: torch.Tensor
    min: torch.Tensor
    max: torch.Tensor
    count: torch.Tensor
    shift: torch.Tensor | None = None
    offset: torch.Tensor | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and floats, for JSON and logs."""
        return {k: getattr(self, k).tolist() for k in ("mean", "std", "var", "min", "max", "count")}


def as_float64(x: Any) -> np.ndarray:
    """A float64 numpy array from a torch tensor, numpy array, number or nested list."""
    return np.asarray(as_array(x), dtype=np.float64)


def as_array(x: Any) -> np.ndarray:
    """A numpy array of a torch tensor (half precisions widened to float32), array, number or list."""
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        x = x.detach().to("cpu")
        if x.dtype in _TORCH_HALF():
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


def _TORCH_HALF() -> tuple[Any, ...]:
    import torch

    return (torch.float16, torch.bfloat16)


class Welford:
    """Per-axis mean, std, var, min, max and count over a stream of batches.

    Args:
        dim: Axes of a batch to reduce over, axis 0 being the sample axis (for
            :meth:`update`, the batch you pass; for :meth:`fold` and ``@reduce``, the
            values stacked along a new axis 0). ``None`` reduces every axis (a scalar
            result); ``0`` gives per-feature statistics of ``[N, F]`` batches, i.e. of
            ``[F]`` samples; ``(0, 2, 3)`` per-channel statistics of NCHW batches, i.e. of
            ``[C, H, W]`` images; ``()`` reduces nothing (only meaningful for
            :meth:`update`).
        ddof: Delta degrees of freedom of ``var`` and ``std`` (0: population, 1: sample).
        nan: ``"propagate"`` (NaN in, NaN out), ``"ignore"`` (NaNs are skipped; counts
            become per position) or ``"raise"``.
    """

    def __init__(self, dim: int | Sequence[int] | None = None, *, ddof: int = 0, nan: NanPolicy = "propagate"):
        if nan not in ("propagate", "ignore", "raise"):
            raise StatsError(f"Welford(nan={nan!r}): expected 'propagate', 'ignore' or 'raise'")
        self.dim: tuple[int, ...] | None = None if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
        self.ddof = int(ddof)
        self.nan: NanPolicy = nan
        self._shape: tuple[int, ...] | None = None
        self._n = np.zeros((), dtype=np.int64)
        self._shift = np.zeros((), dtype=np.float64)  # see the module docstring
        self._open = True  # some position has had no value (so no shift) yet
        self._mean = np.zeros((), dtype=np.float64)  # the mean of x - shift
        self._m2 = np.zeros((), dtype=np.float64)
        self._min = np.full((), np.inf)
        self._max = np.full((), -np.inf)

    def __repr__(self) -> str:
        return f"Welford(dim={self.dim}, ddof={self.ddof}, nan={self.nan!r}, count={self._n.tolist()})"

    # --- folding --------------------------------------------------------------------------

    def _axes(self, ndim: int) -> tuple[int, ...]:
        if self.dim is None:
            return tuple(range(ndim))
        axes = []
        for d in self.dim:
            if not -ndim <= d < ndim:
                raise StatsError(
                    f"Welford(dim={self.dim}) cannot reduce axis {d} of a value with {ndim} axes\n"
                    "  fix: give dim as axes of the values passed to update()"
                )
            axes.append(d % ndim)
        return tuple(sorted(set(axes)))

    def update(self, x: Any) -> None:
        """Folds a batch in, reducing it over ``dim``."""
        b = as_array(x)
        axes = self._axes(b.ndim)
        self._fold(b, axes)

    def fold(self, values: Sequence[Any]) -> None:
        """Folds samples: the values stacked along a new axis 0, then reduced over ``dim``.

        Values of one shape are stacked a few at a time; values whose shapes differ along
        reduced axes (clips of different lengths) are folded one by one, each as a batch
        of one. Raises :class:`StatsError` when ``dim`` keeps the sample axis.

        A stacked column (:class:`~flowdata.columns.Stacked`: a ``@vectorized`` node's
        tensor of the chunk) is sliced, not stacked again: the same rows in the same
        batches, so the same bits.
        """
        self.check_samples()
        if isinstance(values, Stacked) and len(values):
            whole = np.ascontiguousarray(as_array(values.data))
            step = max(1, _STACK_ELEMENTS // max(1, whole[0].size))
            axes = self._axes(whole.ndim)
            for start in range(0, len(whole), step):
                self._fold(whole[start : start + step], axes)
            return
        arrays = [as_array(v) for v in values]
        if not arrays:
            return
        if all(a.shape == arrays[0].shape for a in arrays):
            # Stack a few values at a time: about 1 MB of float64 stays in the CPU cache,
            # where one huge stack would cost a page fault per 4 kB. The grouping depends
            # only on the values' shape, so the arithmetic is the same in every process.
            step = max(1, _STACK_ELEMENTS // max(1, arrays[0].size))
            axes = self._axes(arrays[0].ndim + 1)
            for start in range(0, len(arrays), step):
                self._fold(np.stack(arrays[start : start + step]), axes)
        else:
            for a in arrays:
                self._fold(a[np.newaxis], self._axes(a.ndim + 1))

    def fold_blocks(self, values: Sequence[Any], size: int) -> list[Welford] | None:
        """Each run of ``size`` values of a stacked column folded into a fresh reducer of
        this one's options, at once -- what :meth:`fold` gives for each run alone, bit for
        bit; None where that cannot be done at once (then fold each run alone).

        A reduction folds its values in fixed blocks (:mod:`flowdata.run.folding`); one
        call of a few numpy operations per block costs more than the arithmetic of 64
        small rows, so the blocks of a chunk's column are computed together, with one more
        (block) axis in front: every elementwise step is the same, and each reduction still
        adds one block's rows in order. Done for per-feature statistics (``dim=0``) of
        values of at most one axis, whose block is one batch of :meth:`fold`.
        """
        if not isinstance(values, Stacked) or not len(values) or len(values) % size or self._shape is not None:
            return None
        whole = np.ascontiguousarray(as_array(values.data))
        if whole.ndim > 2 or self._axes(whole.ndim) != (0,) or _STACK_ELEMENTS // max(1, whole[0].size) < size:
            return None
        raw = whole.reshape(len(whole) // size, size, *whole.shape[1:])
        if raw.dtype.kind not in "fiub":
            raw = raw.astype(np.float64)
        if self.nan == "raise" and raw.dtype.kind == "f" and np.isnan(raw).any():
            return None  # each block folded alone: the error names its batch
        first = np.array(raw[:, 0], dtype=np.float64)
        if raw.dtype.kind == "f" and not np.isfinite(first).all():
            if self.nan == "ignore":
                gap = np.isnan(first)
                if gap.any():
                    at = (~np.isnan(raw)).argmax(axis=1)
                    found = np.take_along_axis(raw, at[:, np.newaxis], axis=1)[:, 0]
                    first = np.where(gap, found, first)
            first[~np.isfinite(first)] = 0.0
        against = first[:, np.newaxis]
        y = np.empty(raw.shape, dtype=np.float64)
        if raw.dtype == np.float64:
            np.subtract(raw, against, out=y)
        else:
            np.copyto(y, raw, casting="unsafe")
            np.subtract(y, against, out=y)
        if self.nan == "ignore":
            valid = ~np.isnan(y)
            n_b = valid.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean_b = np.where(n_b > 0, np.nansum(y, axis=1) / n_b, 0.0)
            dev = np.where(valid, y - mean_b[:, np.newaxis], 0.0)
            m2_b = np.sum(dev * dev, axis=1)
            min_b, max_b = np.fmin.reduce(raw, axis=1), np.fmax.reduce(raw, axis=1)
        else:
            n_b = np.full(first.shape, size, dtype=np.int64)
            min_b, max_b = raw.min(axis=1), raw.max(axis=1)
            mean_b = y.mean(axis=1)
            np.subtract(y, mean_b[:, np.newaxis], out=y)
            np.multiply(y, y, out=y)
            m2_b = y.sum(axis=1)
        # What _combine does to a fresh state (count 0, mean and M2 0, extremes +-inf),
        # written with the same operations in the same order, for every block at once.
        kept = first.shape[1:]
        n_a, zero = np.zeros(n_b.shape, dtype=np.int64), np.zeros(n_b.shape)
        n_b = np.asarray(n_b, dtype=np.int64)
        n = n_a + n_b
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(n > 0, n_b / np.maximum(n, 1), 0.0)
            delta = mean_b - zero
            has = n_b > 0
            mean = np.where(has, zero + delta * frac, zero)
            m2 = np.where(has, zero + m2_b + delta * delta * n_a * frac, zero)
        low, high = np.asarray(min_b, dtype=np.float64), np.asarray(max_b, dtype=np.float64)
        if self.nan == "propagate":
            low = np.where(has, np.minimum(np.inf, low), np.inf)
            high = np.where(has, np.maximum(-np.inf, high), -np.inf)
        else:
            low, high = np.fmin(np.inf, low), np.fmax(-np.inf, high)
        empty = (n == 0).reshape(len(n), -1).any(axis=1)
        out = []
        for b in range(len(raw)):
            w = copy.copy(self)  # empty, with this one's class and options
            w._shape = kept
            w._n, w._shift, w._mean, w._m2 = np.array(n[b]), np.array(first[b]), np.array(mean[b]), np.array(m2[b])
            w._min, w._max = np.array(low[b]), np.array(high[b])  # arrays of their own (0-d for scalar values)
            w._open = w.nan == "ignore" and bool(empty[b])
            out.append(w)
        return out

    def check_samples(self) -> None:
        """Raises :class:`StatsError` unless ``dim`` reduces axis 0, the sample axis (what a
        reduction over samples needs; ``@reduce`` calls this when the graph is built)."""
        if self.dim is not None and not any(d == 0 for d in self.dim):
            raise StatsError(
                f"Welford(dim={self.dim}) keeps axis 0, the sample axis, so it cannot reduce samples: "
                "dim names axes of the values stacked into a batch, axis 0 being the samples\n"
                f"  fix: add 0 (dim={(0, *self.dim)!r}); per-feature statistics of [F] vectors are dim=0, "
                "per-channel statistics of [C, H, W] images dim=(0, 2, 3)"
            )

    def _fold(self, raw: np.ndarray, axes: tuple[int, ...]) -> None:
        kept = tuple(s for i, s in enumerate(raw.shape) if i not in axes)
        self._check_shape(kept, raw.shape)
        if raw.size == 0:
            return
        if raw.dtype.kind not in "fiub":  # objects (None is NaN), complex: as numpy converts them
            raw = raw.astype(np.float64)
        if self.nan == "raise" and raw.dtype.kind == "f" and np.isnan(raw).any():
            raise StatsError(
                f"Welford(nan='raise') received {int(np.isnan(raw).sum())} NaN value(s) in a batch "
                f"of shape {raw.shape}\n  fix: clean the data, or use nan='ignore' to skip NaNs"
            )
        if self._open:  # positions without values yet take their shift from this batch
            first = self._first(raw, axes)
            self._shift = np.where(self._n == 0, first, self._shift) if self._n.any() else first
        against = tuple(1 if i in axes else s for i, s in enumerate(raw.shape))  # kept shape, broadcast to raw's
        y = self._shifted(raw, self._shift.reshape(against))
        if self.nan == "ignore":
            valid = ~np.isnan(y)
            n_b = valid.sum(axis=axes)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean_b = np.where(n_b > 0, np.nansum(y, axis=axes) / n_b, 0.0)
            dev = np.where(valid, y - mean_b.reshape(against), 0.0)
            m2_b = np.sum(dev * dev, axis=axes)
            # Every reduced slice has a value (raw is not empty); an all-NaN one gives NaN,
            # which fmin/fmax leave out when combining.
            min_b = np.fmin.reduce(raw, axis=axes)
            max_b = np.fmax.reduce(raw, axis=axes)
        else:
            n_b = np.full(kept, int(np.prod([raw.shape[a] for a in axes])), dtype=np.int64)
            min_b = raw.min(axis=axes)  # extremes are exact in the input's own dtype
            max_b = raw.max(axis=axes)
            mean_b = y.mean(axis=axes)
            np.subtract(y, mean_b.reshape(against), out=y)
            np.multiply(y, y, out=y)
            m2_b = y.sum(axis=axes)
        self._combine(np.asarray(n_b, dtype=np.int64), mean_b, m2_b,
                      np.asarray(min_b, dtype=np.float64), np.asarray(max_b, dtype=np.float64))
        if self._open:  # without nan="ignore", every position has values now
            self._open = self.nan == "ignore" and bool((self._n == 0).any())

    def _first(self, raw: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        """Each kept position's first value in the batch, in C order over ``axes`` (with
        ``nan="ignore"``, its first that is not NaN), as float64; 0 where that value is not
        finite or there is none."""
        first = np.array(raw[tuple(0 if i in axes else slice(None) for i in range(raw.ndim))], dtype=np.float64)
        if raw.dtype.kind != "f" or np.isfinite(first).all():  # the common case, in two small steps
            return first
        if self.nan == "ignore":
            gap = np.isnan(first)
            if gap.any():  # a missing first cell: search the batch for the first value
                flat = np.moveaxis(raw, axes, tuple(range(raw.ndim - len(axes), raw.ndim))).reshape(*first.shape, -1)
                at = (~np.isnan(flat)).argmax(axis=-1)
                first = np.where(gap, np.take_along_axis(flat, at[..., np.newaxis], axis=-1)[..., 0], first)
        first[~np.isfinite(first)] = 0.0
        return first

    def _shifted(self, raw: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """``raw - shift`` in float64, in a scratch buffer reused across updates of the same
        shape; never ``raw`` itself.

        A fresh multi-megabyte array per batch costs a page fault per 4 kB; reusing one
        buffer (up to 16 MB) keeps the update close to numpy's own reduction speed.
        """
        buf: np.ndarray | None = None if raw.size * 8 > _SCRATCH_BYTES else self.__dict__.get("_scratch")
        if buf is None or buf.shape != raw.shape:
            buf = np.empty(raw.shape, dtype=np.float64)
            if raw.size * 8 <= _SCRATCH_BYTES:
                self.__dict__["_scratch"] = buf
        if raw.dtype == np.float64:
            np.subtract(raw, shift, out=buf)
        else:  # widening first, then subtracting in place, beats numpy's buffered mixed-type subtract
            np.copyto(buf, raw, casting="unsafe")
            np.subtract(buf, shift, out=buf)
        return buf

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_scratch", None)  # a cache, not state
        return state

    def _check_shape(self, kept: tuple[int, ...], shape: tuple[int, ...]) -> None:
        if self._shape is None:
            self._shape = kept
            self._n = np.zeros(kept, dtype=np.int64)
            self._shift = np.zeros(kept)
            self._mean = np.zeros(kept)
            self._m2 = np.zeros(kept)
            self._min = np.full(kept, np.inf)
            self._max = np.full(kept, -np.inf)
        elif kept != self._shape:
            raise StatsError(
                f"Welford(dim={self.dim}) expected values whose kept shape is {self._shape}, "
                f"got {kept} (from a value of shape {shape})\n"
                "  fix: make every value the same shape along the kept axes, or reduce over "
                "the axes that vary (dim=...)"
            )

    def _combine(self, n_b: np.ndarray, mean_b: np.ndarray, m2_b: np.ndarray, min_b: np.ndarray, max_b: np.ndarray) -> None:
        """Chan's merge of a batch's count, mean and M2 (about this reducer's shift)."""
        n_a = self._n
        n = n_a + n_b
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(n > 0, n_b / np.maximum(n, 1), 0.0)
            delta = mean_b - self._mean
            has = n_b > 0
            self._mean = np.where(has, self._mean + delta * frac, self._mean)
            self._m2 = np.where(has, self._m2 + m2_b + delta * delta * n_a * frac, self._m2)
        if self.nan == "propagate":
            self._min = np.where(has, np.minimum(self._min, min_b), self._min)
            self._max = np.where(has, np.maximum(self._max, max_b), self._max)
        else:
            self._min = np.fmin(self._min, min_b)
            self._max = np.fmax(self._max, max_b)
        self._n = n

    def merge(self, other: Welford) -> Welford:
        """Folds another Welford's state in (Chan's formula); returns self.

        Positions this one has no values of take the other's shift; elsewhere the other's
        mean is moved to this one's shift first (see the module docstring)."""
        if not isinstance(other, Welford):
            raise StatsError(f"cannot merge {type(other).__name__} into Welford")
        if other._shape is None:
            return self
        self._check_shape(other._shape, other._shape)
        if self._open:
            self._shift = np.where((self._n == 0) & (other._n > 0), other._shift, self._shift)
        self._combine(other._n, other._mean + (other._shift - self._shift), other._m2, other._min, other._max)
        if self._open:
            self._open = bool((self._n == 0).any())
        return self

    # --- results and state ------------------------------------------------------------------

    def result(self) -> Stats:
        """The statistics so far (NaN where nothing was folded)."""
        import torch

        with np.errstate(invalid="ignore", divide="ignore"):
            empty = self._n == 0
            mean = np.where(empty, np.nan, self._shift + self._mean)
            var = np.where(self._n - self.ddof > 0, self._m2 / np.maximum(self._n - self.ddof, 1), np.nan)
            mn = np.where(empty, np.nan, self._min)
            mx = np.where(empty, np.nan, self._max)
            shift = np.where(empty, np.nan, self._shift)
            offset = np.where(empty, np.nan, self._mean)
        t = torch.from_numpy
        return Stats(
            mean=t(np.array(mean, dtype=np.float64)),
            std=t(np.array(np.sqrt(var), dtype=np.float64)),
            var=t(np.array(var, dtype=np.float64)),
            min=t(np.array(mn, dtype=np.float64)),
            max=t(np.array(mx, dtype=np.float64)),
            count=t(np.array(self._n, dtype=np.int64)),
            shift=t(np.array(shift, dtype=np.float64)),
            offset=t(np.array(offset, dtype=np.float64)),
        )

    def state_dict(self) -> dict[str, np.ndarray]:
        """Plain arrays: options and state (``offset`` and ``m2`` are about ``shift``)."""
        return {
            "dim": np.array(self.dim if self.dim is not None else [], dtype=np.int64),
            "dim_is_none": np.array(self.dim is None),
            "ddof": np.array(self.ddof),
            "nan": np.array(self.nan),
            "has_shape": np.array(self._shape is not None),
            "count": np.array(self._n, dtype=np.int64),
            "shift": np.array(self._shift, dtype=np.float64),
            "offset": np.array(self._mean, dtype=np.float64),
            "m2": np.array(self._m2, dtype=np.float64),
            "min": np.array(self._min, dtype=np.float64),
            "max": np.array(self._max, dtype=np.float64),
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Welford:
        """A Welford restored from :meth:`state_dict` (arrays, or what ``np.load`` returns).

        A state written before values were shifted (a ``mean`` and no ``shift``) is the
        same state about a shift of 0, and loads as that: its results are unchanged, and
        positions keep accumulating about 0."""
        dim = None if bool(np.asarray(state["dim_is_none"])) else tuple(int(d) for d in np.asarray(state["dim"]))
        w = cls(dim, ddof=int(np.asarray(state["ddof"])), nan=str(np.asarray(state["nan"])))  # type: ignore[arg-type]
        if bool(np.asarray(state["has_shape"])):
            w._n = np.array(state["count"], dtype=np.int64)
            w._shape = w._n.shape
            if "shift" in state:
                w._shift = np.array(state["shift"], dtype=np.float64)
                w._mean = np.array(state["offset"], dtype=np.float64)
            else:
                w._shift = np.zeros(w._shape)
                w._mean = np.array(state["mean"], dtype=np.float64)
            w._m2 = np.array(state["m2"], dtype=np.float64)
            w._min = np.array(state["min"], dtype=np.float64)
            w._max = np.array(state["max"], dtype=np.float64)
            w._open = bool((w._n == 0).any())
        return w
