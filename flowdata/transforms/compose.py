"""``Compose``: transforms in order, each run of adjacent spatial ones fused into one resampling.

A *run* is a maximal sequence of adjacent :class:`SpatialTransform` members. Its matrices
compose into one map ``M = M_k ... M_1`` (Python floats), and the run is carried out once:

- **exactly** when ``M`` takes output pixel centres to input pixel centres with no scaling
  (crops, flips, pads, quarter turns, whole-pixel shifts): slicing and flipping, no
  interpolation, no ``grid_sample``;
- with ``antialias`` (bilinear) and no rotation or shear in ``M`` (resizes, crops, flips,
  pads): by one filter matrix per axis, ``wy @ x @ wx.T``, each row the antialiased
  triangle filter of torchvision's resize at that output pixel -- so a fused resize and
  crop equals torchvision's resize then crop, to float rounding;
- else by **one** ``grid_sample`` of the run's input at ``M^-1 p`` for every output pixel
  centre ``p``, after, where ``M`` shrinks along an axis (by however little) and
  ``antialias`` is on, an antialiasing prefilter (:class:`~flowdata.transforms.prefilter.Prefilter`:
  torchvision's triangle for that shrink, sampled at half the output's spacing or at the
  input's, folded into ``M``; at the input's, a run under ``"zeros"`` filters only the
  rows and columns its grid reads: a random run only on the CPU, where a batch then runs
  sample by sample, so that a sample alone and its row of a batch are the same operations).

Other members (``Normalize``, a nested ``Compose``, any ``nn.Module``) run as themselves
between runs. A ``Pad`` whose padding ``grid_sample`` cannot reproduce at the run's
``padding_mode`` (reflect, a non-zero fill, replicate under zeros) runs on its own too.

Random members draw from the generator given to the call, in member order; on a batch
``[N, C, H, W]`` each sample draws its own parameters (run by run: sample 0's draws for
the run, then sample 1's, ...), and the run becomes one batched ``grid_sample``. A batch
may come with one generator per sample instead (a batch node's ``sample_rng``): each
sample then draws from its own, exactly as it would alone. A fixed
run's plan (its grid, or its slicing) is kept per input size, dtype and device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from flowdata.transforms.coverage import Coverage, coverage_mask, coverage_plan, fully_covered
from flowdata.transforms.features import FeatureTransform
from flowdata.transforms.prefilter import Prefilter, apply_prefilter, prefilter_plan
from flowdata.transforms.sampling import (
    IDENTITY, AffineMap, ExactPlan, Size, axis_aligned, axis_weights, check_image, check_interpolable, compose,
    exact_plan, grid_theta, invert, make_grid, outside_margins, sample_grid, separable, take_exact, translate,
    zero_margins,
)
from flowdata.transforms.spatial import Pad, SpatialTransform, check_mode

__all__ = ["Compose"]

_MAX_PLANS = 64  # per-size plans kept by one Compose (one per input size, dtype and device)


class _Memo:
    """A Compose's derived work: its steps and its fixed runs' plans. Never pickled or
    copied (a copy starts empty), so a Compose pickles, saves and digests by its arguments."""

    def __init__(self) -> None:
        self.steps: list[tuple[bool, tuple[nn.Module, ...]]] | None = None
        self.plans: dict[tuple[Any, ...], _Plan] = {}

    def __reduce__(self) -> tuple[type[_Memo], tuple[()]]:
        return (_Memo, ())

    def __deepcopy__(self, memo: dict[int, Any]) -> _Memo:
        return _Memo()


class _Plan:
    """How one sample goes through a run: slicing; or, antialiased with no rotation or shear,
    two filter matrices (one per axis); else a prefilter (or none), then one grid."""

    __slots__ = ("cover", "crop", "exact", "grid", "margins", "mask", "out", "padding", "prefilter", "separable", "size",
                 "theta", "weights")

    def __init__(self, inverse: AffineMap, size: Size, out: Size, antialias: bool, padding_mode: str,
                 crop: bool = True):
        self.out, self.size = out, size
        self.weights: tuple[torch.Tensor, torch.Tensor] | None = None
        self.separable: AffineMap | None = None
        self.grid: torch.Tensor | None = None
        self.prefilter: Prefilter | None = None
        self.crop: tuple[int, int, int, int] | None = None  # rows and columns read: (top, bottom, left, right)
        self.exact: ExactPlan | None = exact_plan(inverse, out)
        self.theta: tuple[float, ...] | None = None
        self.margins: tuple[int, int, int, int] | None = None
        self.cover: Coverage | None = None  # a prefiltered grid under zeros: sampled as border, times this
        self.mask: torch.Tensor | None = None
        self.padding = padding_mode  # grid_sample's
        if self.exact is not None:
            return
        if antialias and axis_aligned(inverse) and padding_mode in ("zeros", "border"):
            self.separable = inverse  # resizes, crops, flips, pads: each axis's antialiased filter
            return
        original = inverse
        if antialias:
            self.prefilter, inverse = prefilter_plan(inverse, size)
        if self.prefilter is not None:
            size = self.prefilter.size
            if crop and padding_mode == "zeros" and size == self.size:
                # filtered at the input's own pixels: filter only the rows and columns the grid reads
                self.crop = _reads(inverse, size, out)
                top, bottom, left, right = self.crop
                inverse = compose(translate(-left, -top), inverse)
                size = (bottom - top, right - left)
                self.prefilter = Prefilter(size, self.prefilter.blur, self.prefilter.diagonal)
            self.exact = exact_plan(inverse, out)
        if self.exact is None:
            self.theta = grid_theta(inverse, size, out)
            # zeros with no rotation or shear: sampled as "border", the rows and columns outside set to 0
            if padding_mode == "zeros":
                self.margins = outside_margins(inverse, size, out)
            # prefiltered (it shrinks) under zeros: the frame's edges fade over each output pixel's footprint
            if padding_mode == "zeros" and self.prefilter is not None and self.margins is None:
                self.padding = "border"
                cover = coverage_plan(original, self.size, out)
                # no edge reaches any footprint (cropped away): the mask would be all ones, so
                # "border" alone gives the same bits
                self.cover = None if fully_covered(cover, out) else cover
            if self.margins is not None:
                self.padding = "border"


def _reads(inverse: AffineMap, size: Size, out: Size) -> tuple[int, int, int, int]:
    """``(top, bottom, left, right)``: the rows and columns of an input of ``size`` that a grid
    of ``out`` pixel centres reads through ``inverse`` (bilinear: the two pixels about each
    point), with 2 more on each side (the 3-tap filter's edge pixels are then never read)."""
    a, b, c, d, e, f = inverse
    xs, ys = [], []
    for px in (0.5, out[1] - 0.5):
        for py in (0.5, out[0] - 0.5):
            xs.append(a * px + b * py + c)
            ys.append(d * px + e * py + f)
    top, bottom = math.floor(min(ys) - 0.5) - 2, math.floor(max(ys) - 0.5) + 4
    left, right = math.floor(min(xs) - 0.5) - 2, math.floor(max(xs) - 0.5) + 4
    top, left = min(max(top, 0), size[0] - 1), min(max(left, 0), size[1] - 1)
    return top, max(min(bottom, size[0]), top + 1), left, max(min(right, size[1]), left + 1)


class Compose(FeatureTransform):
    """Runs ``transforms`` in order, fusing each run of adjacent spatial transforms.

    Args:
        *transforms: ``nn.Module`` s (a single list or tuple of them also works). Spatial
            ones (:class:`~flowdata.transforms.SpatialTransform`) fuse; others run as
            themselves, random ones (``random = True``) with the call's generator.
        mode: ``"bilinear"``, or ``"nearest"`` for label maps (values are kept; integer
            tensors work).
        padding_mode: ``grid_sample``'s ``"zeros"``, ``"border"`` or ``"reflection"`` (which
            repeats the edge pixel): what a run sees outside its input.
        fuse: ``False`` runs every transform on its own (each interpolating one
            interpolates), with the same draws: the baseline, and a debugging aid.
        antialias: Filter where a fused run shrinks: a run with no rotation or shear by
            each axis's antialiased filter (torchvision's resize), any other by a
            prefilter first wherever it shrinks, by however little (``"bilinear"`` only).

    Call it as ``compose(x, generator)`` on ``[C, H, W]`` or ``[N, C, H, W]``; on a batch,
    ``generator`` may also be a sequence of ``N`` generators, one per sample (a batch
    node's ``sample_rng``), each sample drawing from its own: the batch then equals its
    samples transformed one by one with their generators.
    """

    def __init__(self, *transforms: nn.Module, mode: str = "bilinear", padding_mode: str = "zeros",
                 fuse: bool = True, antialias: bool = True):
        super().__init__()
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            transforms = tuple(transforms[0])
        for i, t in enumerate(transforms):
            if not isinstance(t, nn.Module):
                raise ValueError(f"Compose: transform {i} is a {type(t).__name__}, expected an nn.Module (a "
                                 "FeatureTransform); fix: wrap a function in an nn.Module subclass, which pickles")
        check_mode("Compose", mode, padding_mode)
        self.transforms = nn.ModuleList(transforms)
        self.mode = mode
        self.padding_mode = padding_mode
        self.fuse = bool(fuse)
        self.antialias = bool(antialias)
        self.random = any(bool(getattr(t, "random", False)) for t in transforms)
        self._memo = _Memo()

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose({inner}, mode={self.mode!r}, padding_mode={self.padding_mode!r}, fuse={self.fuse})"

    def steps(self) -> list[tuple[bool, tuple[nn.Module, ...]]]:
        """The members grouped as they run: ``(True, run)`` for a run of spatial transforms,
        ``(False, (member,))`` for a member that runs as itself."""
        if self._memo.steps is None:
            steps: list[tuple[bool, tuple[nn.Module, ...]]] = []
            run: list[nn.Module] = []
            for t in self.transforms:
                alone = isinstance(t, Pad) and t.fused_padding() != self.padding_mode
                if isinstance(t, SpatialTransform) and not alone:
                    run.append(t)
                    continue
                if run:
                    steps.append((True, tuple(run)))
                    run = []
                steps.append((False, (t,)))
            if run:
                steps.append((True, tuple(run)))
            self._memo.steps = steps
        return self._memo.steps

    def forward(self, x: torch.Tensor, generator: torch.Generator | Sequence[torch.Generator] | None = None
                ) -> torch.Tensor:
        check_image(x, "Compose")
        generator = _generators(x, generator)
        for is_run, members in self.steps():
            if is_run:
                x = self._fused(x, members, generator) if self.fuse else self._unfused(x, members, generator)
            else:
                t = members[0]
                if not getattr(t, "random", False):
                    x = t(x)
                elif isinstance(generator, list):  # each sample with its own generator
                    x = torch.stack([t(x[n], g) for n, g in enumerate(generator)])
                else:
                    x = t(x, generator)
        return x

    # --- fuse=False: each member on its own, the same draws -----------------------------

    def _unfused(self, x: torch.Tensor, run: tuple[nn.Module, ...], generator: _Generators) -> torch.Tensor:
        if x.dim() == 4 and any(getattr(t, "random", False) for t in run):
            return torch.stack([self._unfused(x[n], run, generator[n] if isinstance(generator, list) else generator)
                                for n in range(x.shape[0])])
        one = None if isinstance(generator, list) else generator  # a list: no member here draws
        for t in run:
            assert isinstance(t, SpatialTransform)
            x = t.run_alone(x, one if t.random else None, self.mode, self.padding_mode)
        return x

    # --- fused ----------------------------------------------------------------------------

    def _chain(self, run: tuple[nn.Module, ...], size: Size, generator: torch.Generator | None
               ) -> tuple[AffineMap, Size]:
        m = IDENTITY
        for t in run:
            step, size = t._affine(size, generator if t.random else None)  # type: ignore[operator]
            m = compose(step, m)
        return m, size

    def _plan(self, run: tuple[nn.Module, ...], size: Size, generator: torch.Generator | None,
              crop: bool = True) -> _Plan:
        m, out = self._chain(run, size, generator)
        return _Plan(invert(m, "Compose"), size, out, self.antialias and self.mode == "bilinear", self.padding_mode,
                     crop)

    def _fused(self, x: torch.Tensor, run: tuple[nn.Module, ...], generator: _Generators) -> torch.Tensor:
        size = (x.shape[-2], x.shape[-1])
        if not any(getattr(t, "random", False) for t in run):
            key = (id(run), size, x.dtype, x.device)  # a run's tuple lives as long as the memo
            plan = self._memo.plans.get(key)
            if plan is None:
                if len(self._memo.plans) >= _MAX_PLANS:
                    self._memo.plans.clear()
                plan = self._memo.plans[key] = self._plan(run, size, None)
            return self._one(x, plan, cache=True)
        # on the CPU each sample filters only what its grid reads, in a batch as alone (the same
        # operations on the same window: the same bits); elsewhere whole images, so that a batch
        # is one batched pass where launches, not pixels, are the cost
        crop = x.device.type == "cpu"
        if x.dim() == 3:
            assert not isinstance(generator, list)
            return self._one(x, self._plan(run, size, generator, crop), cache=False)
        own = generator if isinstance(generator, list) else [generator] * x.shape[0]
        return self._batch(x, [self._plan(run, size, g, crop) for g in own])  # one prefilter per group

    def _one(self, x: torch.Tensor, plan: _Plan, cache: bool) -> torch.Tensor:
        """One plan for the whole of ``x`` (a sample, or a batch under a fixed run)."""
        if plan.separable is not None:
            return self._separable(x, plan, cache)
        mask = self._mask(plan, x, cache)  # first: its temporaries are gone before the prefilter's arrive
        if plan.prefilter is not None:
            check_interpolable(x, self.mode, "Compose")
            if plan.crop is not None:
                top, bottom, left, right = plan.crop
                x = x[..., top:bottom, left:right]
            x4 = apply_prefilter(x if x.dim() == 4 else x[None], plan.prefilter)
            x = x4 if x.dim() == 4 else x4[0]
        if plan.exact is not None:
            return take_exact(x, plan.exact, self.padding_mode)
        check_interpolable(x, self.mode, "Compose")
        grid = plan.grid
        dtype = x.dtype if x.is_floating_point() else torch.float64
        if grid is None or grid.dtype != dtype or grid.device != x.device:
            assert plan.theta is not None
            grid = make_grid([plan.theta], plan.out, dtype, x.device)
            if cache:
                plan.grid = grid
        y = sample_grid(x if x.dim() == 4 else x[None], grid, self.mode, plan.padding)
        if plan.margins is not None:
            zero_margins(y, plan.margins)
        if mask is not None:
            y.mul_(mask)
        return y if x.dim() == 4 else y[0]

    @staticmethod
    def _mask(plan: _Plan, x: torch.Tensor, cache: bool) -> torch.Tensor | None:
        """A covered plan's coverage mask, kept with the plan for a fixed run."""
        if plan.cover is None:
            return None
        mask = plan.mask
        if mask is None or mask.dtype != x.dtype or mask.device != x.device:
            mask = coverage_mask([plan.cover], plan.out, x.dtype, x.device)
            if cache:
                plan.mask = mask
        return mask

    def _separable(self, x: torch.Tensor, plan: _Plan, cache: bool) -> torch.Tensor:
        """A map with no rotation or shear: ``wy @ x @ wx.T``, each axis's antialiased filter."""
        check_interpolable(x, self.mode, "Compose")
        weights = plan.weights
        if weights is None or weights[0].dtype != x.dtype or weights[0].device != x.device:
            a, _, c, _, e, f = plan.separable  # type: ignore[misc]
            (h, w), (oh, ow) = plan.size, plan.out
            weights = (axis_weights(e, f, oh, h, self.padding_mode, x.dtype, x.device),
                       axis_weights(a, c, ow, w, self.padding_mode, x.dtype, x.device))
            if cache:
                plan.weights = weights
        return separable(x, *weights)

    def _batch(self, x: torch.Tensor, plans: list[_Plan]) -> torch.Tensor:
        """A plan per sample: exact ones slice each sample, the rest share batched grid_samples
        (one per prefilter; usually one); filter-matrix and windowed plans run sample by sample."""
        if any(p.separable is not None or p.crop is not None for p in plans):  # a window (or matrices) each
            return torch.stack([self._one(x[n], p, cache=False) for n, p in enumerate(plans)])
        if all(p.exact is not None for p in plans) and all(p.prefilter is None for p in plans):
            return torch.stack([take_exact(x[n], p.exact, self.padding_mode)  # type: ignore[arg-type]
                                for n, p in enumerate(plans)])
        check_interpolable(x, self.mode, "Compose")
        groups: dict[tuple[Prefilter | None, str], list[int]] = {}
        for n, p in enumerate(plans):
            groups.setdefault((p.prefilter, p.padding), []).append(n)
        out: torch.Tensor | None = None
        dtype = x.dtype if x.is_floating_point() else torch.float64
        for (prefilter, padding), idx in groups.items():
            xs = x if len(idx) == x.shape[0] else x[idx]
            if prefilter is not None:
                xs = apply_prefilter(xs, prefilter)
            thetas = [_theta(plans[n], xs) for n in idx]
            y = sample_grid(xs, make_grid(thetas, plans[0].out, dtype, x.device), self.mode, padding)
            for k, n in enumerate(idx):
                margins = plans[n].margins
                if margins is not None:
                    zero_margins(y[k], margins)
            covered = [k for k, n in enumerate(idx) if plans[n].cover is not None]
            if covered:
                covers = [plans[idx[k]].cover for k in covered]
                mask = coverage_mask(covers, plans[0].out, y.dtype, y.device)  # type: ignore[arg-type]
                if len(covered) == len(idx):
                    y.mul_(mask)
                else:
                    y[covered] *= mask
            if len(idx) == x.shape[0]:
                return y
            if out is None:
                out = y.new_empty((x.shape[0], *y.shape[1:]))
            out[idx] = y
        assert out is not None
        return out


_Generators = torch.Generator | list[torch.Generator] | None


def _generators(x: torch.Tensor, generator: torch.Generator | Sequence[torch.Generator] | None) -> _Generators:
    """The call's generator, or its list of one generator per sample of a batch (checked)."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    gens = list(generator)
    if x.dim() != 4 or len(gens) != x.shape[0] or not all(isinstance(g, torch.Generator) for g in gens):
        what = f"a batch of {x.shape[0]}" if x.dim() == 4 else f"a single image {tuple(x.shape)}"
        raise ValueError(f"Compose: generator is a sequence of {len(gens)} (expected one torch.Generator per "
                         f"sample), but x is {what}; fix: pass one generator, or one per sample of an "
                         "[N, C, H, W] batch (a batch node's sample_rng)")
    return gens


def _theta(plan: _Plan, x: torch.Tensor) -> tuple[float, ...]:
    """A plan's normalised map; an exact plan's too, for a sample batched with samples that
    interpolate (its grid then lands on pixel centres)."""
    if plan.theta is not None:
        return plan.theta
    e = plan.exact
    assert e is not None
    # the inverse map back from the plan: col = col0 + col_step * (j or i), centres at +0.5
    if e.transpose:
        inverse = (0.0, float(e.col_step), e.col0 + 0.5 - 0.5 * e.col_step, float(e.row_step), 0.0,
                   e.row0 + 0.5 - 0.5 * e.row_step)
    else:
        inverse = (float(e.col_step), 0.0, e.col0 + 0.5 - 0.5 * e.col_step, 0.0, float(e.row_step),
                   e.row0 + 0.5 - 0.5 * e.row_step)
    return grid_theta(inverse, (x.shape[-2], x.shape[-1]), plan.out)
