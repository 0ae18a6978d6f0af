"""The antialiasing prefilter of a run that rotates or shears, where it shrinks the image.

Along each input axis, torchvision's triangle for the shrink ``d`` (the reach of one output
pixel, :func:`footprints`): where ``d >= 2`` the axis is first reduced to about ``d / 2``
input pixels a pixel by torch's antialiased ``interpolate``, then the 3-tap ``[1/4, 1/2, 1/4]``;
where ``1 < d < 2``, the 3-tap ``[1 - 1/d, 1, 1 - 1/d]`` (normalised) at the input's own pixels.
There, a separable filter passes ``rx * ry`` of the input's finest diagonal pattern (a 1-px
checkerboard), while the output pixel's footprint, turned, can invert it (its box's response
is negative past ``d = 2 / (cos + sin)`` of the angle): where it does, a diagonal term
``[1, -2, 1] x [1, -2, 1]`` takes that response to 0 and changes no other axis's Nyquist.

:func:`resample` is one affine resampling of an image: exact where the map takes pixel
centres to pixel centres, else this prefilter (when asked to antialias) and one
``grid_sample`` (:mod:`flowdata.transforms.sampling`, which this module builds on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from flowdata.transforms.sampling import (
    _EPS, AffineMap, Size, check_image, check_interpolable, compose, exact_plan, grid_theta, invert, make_grid,
    sample_grid, scale, take_exact,
)

__all__ = ["Prefilter", "apply_prefilter", "footprints", "prefilter_plan", "resample"]


@dataclass(frozen=True)
class Prefilter:
    """How a map that rotates or shears is antialiased before its ``grid_sample``.

    ``size`` is the filtered image's ``(height, width)``: an axis along which an output pixel
    spans ``d >= 2`` input pixels is first reduced to about ``d / 2`` input pixels a pixel
    (torch's antialiased bilinear ``interpolate``, a triangle as wide as that spacing); then
    each axis with ``blur`` above 0 is filtered by the 3-tap ``[blur, 1, blur]`` (normalised,
    the edge repeating). Together, along an axis, a triangle ``d`` input pixels wide on each
    side -- torchvision's antialiasing filter for shrinking by ``d`` -- sampled at a spacing
    of ``d / 2`` or 1, so the one bilinear interpolation after it (a triangle of one spacing)
    blurs half as much as the interpolation of a resized image (a triangle of ``d``).
    ``diagonal`` (at the input's own pixels only) is added to the two 3-taps' response at the
    diagonal Nyquist frequency: ``-rx * ry`` where the footprint's box inverts that pattern.
    """

    size: Size
    blur: tuple[float, float]  # (y, x): the 3-tap filter's outer weight, 0 for none
    diagonal: float = 0.0  # added to the response at the diagonal Nyquist frequency (<= 0), 0 for none


def footprints(inverse: AffineMap) -> tuple[float, float]:
    """``(dy, dx)``: how far along the input's y and x one output pixel reaches at most, in
    input pixels (the norms of the inverse's rows: a step of one output pixel in any
    direction moves x by at most ``hypot(a, b)``). Exact for a resize followed by a
    rotation; a bound for any other map, so it filters at least as much as it shrinks."""
    a, b, _, d, e, _ = inverse
    return math.hypot(d, e), math.hypot(a, b)


def prefilter_plan(inverse: AffineMap, size: Size) -> tuple[Prefilter | None, AffineMap]:
    """The prefilter that antialiases ``inverse`` for an input of ``size`` (None where it
    shrinks along no axis), and the inverse map into the filtered image's coordinates."""
    reach = footprints(inverse)
    if max(reach) <= 1.0 + _EPS:
        return None, inverse
    out_size: list[int] = []
    steps: list[float] = []
    blur: list[float] = []
    for d, n in zip(reach, size):
        n_out = max(1, round(n / (d / 2.0))) if d >= 2.0 - _EPS else n
        step = n / n_out
        out_size.append(n_out)
        steps.append(step)
        radius = d / step  # the triangle's half-width in filtered pixels (2, or d under 2)
        blur.append(max(0.0, 1.0 - 1.0 / radius) if radius > 1.0 + _EPS else 0.0)
    diagonal = _diagonal(inverse, (blur[0], blur[1])) if tuple(out_size) == tuple(size) else 0.0
    prefilter = Prefilter((out_size[0], out_size[1]), (blur[0], blur[1]), diagonal)
    return prefilter, compose(scale(1.0 / steps[1], 1.0 / steps[0]), inverse)


def _sinc(v: float) -> float:
    return 1.0 if v == 0.0 else math.sin(math.pi * v) / (math.pi * v)


def _diagonal(inverse: AffineMap, blur: tuple[float, float]) -> float:
    """How much to take off the two 3-tap filters' response at the input's diagonal Nyquist
    frequency (a 1-px checkerboard) so that it is no more than the output pixel's footprint
    passes there (the box over the parallelogram spanned by the inverse's columns), nor below 0."""
    a, b, _, d, e, _ = inverse
    ry, rx = ((1.0 - 2.0 * w) / (1.0 + 2.0 * w) for w in blur)
    box = min(_sinc(0.5 * (a + d)) * _sinc(0.5 * (b + e)), _sinc(0.5 * (a - d)) * _sinc(0.5 * (b - e)))
    # only where the box's response is negative (it would invert the pattern): there, none of
    # it; elsewhere the triangle's, which tends to no filter as the shrink tends to 1
    return -rx * ry if box < 0.0 else 0.0


def _diagonal_filter(x: torch.Tensor, wy: float, wx: float, diagonal: float) -> torch.Tensor:
    """``Kx Ky x + diagonal / 16 * Lx Ly x`` on ``[..., H, W]``: the two 3-taps (their edges
    renormalised, as :func:`_blur3`) and ``L = [1, -2, 1]`` (the edge repeating), which changes
    the response at the diagonal Nyquist frequency alone (by 16 / 16 there, 0 at the axes'
    Nyquist and at 0). As ``K = 1 + w / (1 + 2w) L`` (``w / (1 + w)`` at the edges), it is
    ``v + Lx(kx v + diagonal / 16 * u)`` with ``u = Ly x`` and ``v = Ky x``: one pass along x."""
    h, w = x.shape[-2], x.shape[-1]
    if h < 3 or w < 3:
        return _blur3(_blur3(x, -2, wy), -1, wx)  # too small to matter: the diagonal term left out
    u = torch.empty_like(x)  # Ly x
    torch.add(x[..., :-2, :], x[..., 2:, :], out=u[..., 1:-1, :])
    u[..., 1:-1, :].sub_(x[..., 1:-1, :], alpha=2.0)
    torch.sub(x[..., 1:2, :], x[..., 0:1, :], out=u[..., 0:1, :])
    torch.sub(x[..., -2:-1, :], x[..., -1:, :], out=u[..., -1:, :])
    v = torch.add(x, u, alpha=wy / (1.0 + 2.0 * wy))
    for row in (0, h - 1):  # renormalised edges: x0 + w / (1 + w) (x1 - x0)
        v[..., row, :].add_(u[..., row, :], alpha=wy / (1.0 + wy) - wy / (1.0 + 2.0 * wy))
    z = v * (wx / (1.0 + 2.0 * wx))
    z.add_(u, alpha=diagonal / 16.0)
    edge = (1.0 + 2.0 * wx) / (1.0 + wx)
    y = v  # v + Lx z, the edge columns' Lx times edge
    y[..., 1:-1].sub_(z[..., 1:-1], alpha=2.0).add_(z[..., :-2]).add_(z[..., 2:])
    y[..., 0:1].add_(z[..., 1:2] - z[..., 0:1], alpha=edge)
    y[..., -1:].add_(z[..., -2:-1] - z[..., -1:], alpha=edge)
    return y


def _blur3(x: torch.Tensor, dim: int, w: float) -> torch.Tensor:
    """``[w, 1, w]`` along ``dim``, normalised over the pixels inside (the edge repeats)."""
    n = x.shape[dim]
    if n == 1 or w <= 0.0:
        return x
    norm = 1.0 / (1.0 + 2.0 * w)  # the interior's; the two edge pixels are rescaled after
    y = x * norm
    y.narrow(dim, 1, n - 1).add_(x.narrow(dim, 0, n - 1), alpha=w * norm)
    y.narrow(dim, 0, n - 1).add_(x.narrow(dim, 1, n - 1), alpha=w * norm)
    edge = (1.0 + 2.0 * w) / (1.0 + w)
    y.narrow(dim, 0, 1).mul_(edge)
    y.narrow(dim, n - 1, 1).mul_(edge)
    return y


def apply_prefilter(x: torch.Tensor, prefilter: Prefilter) -> torch.Tensor:
    """Carries out a :class:`Prefilter` on a float ``[N, C, H, W]``."""
    if (x.shape[-2], x.shape[-1]) != prefilter.size:
        x = F.interpolate(x, size=prefilter.size, mode="bilinear", antialias=True, align_corners=False)
    wy, wx = prefilter.blur
    if not prefilter.diagonal:
        return _blur3(_blur3(x, -2, wy), -1, wx)
    return _diagonal_filter(x, wy, wx, prefilter.diagonal)


def resample(x: torch.Tensor, forward: AffineMap, out: Size, mode: str = "bilinear", padding_mode: str = "zeros",
             antialias: bool = False, who: str = "resample") -> torch.Tensor:
    """``[C, H, W]`` or ``[N, C, H, W]`` (one map for all) carried through ``forward``: exactly
    when it maps pixel centres to pixel centres, else by one ``grid_sample`` (after the
    :class:`Prefilter` when ``antialias`` and it shrinks)."""
    check_image(x, who)
    inverse = invert(forward, who)
    plan = exact_plan(inverse, out)
    if plan is not None:
        return take_exact(x, plan, padding_mode)
    check_interpolable(x, mode, who)
    x4 = x if x.dim() == 4 else x[None]
    prefilter, inverse = prefilter_plan(inverse, (x4.shape[-2], x4.shape[-1])) if antialias and mode == "bilinear" \
        else (None, inverse)
    if prefilter is not None:
        x4 = apply_prefilter(x4, prefilter)
    grid = make_grid([grid_theta(inverse, (x4.shape[-2], x4.shape[-1]), out)], out, _grid_dtype(x4), x4.device)
    y = sample_grid(x4, grid, mode, padding_mode)
    return y if x.dim() == 4 else y[0]


def _grid_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.float64
