"""How much of each output pixel's footprint lies inside the input: the edge of a turned frame.

A run that rotates and shrinks is sampled, after its prefilter, at one point per output
pixel. Inside the input that point stands for the whole footprint (the prefilter has
averaged over it), but at the frame's edges ``grid_sample``'s zeros would blend the point
with the zeros beyond the edge over one spacing of the *filtered* grid (half an output
pixel), where an output pixel averaging its footprint fades out over the whole footprint.
So, under ``padding_mode="zeros"``, such a run is sampled as ``"border"`` and each output
pixel is multiplied by its *coverage*: the mean over its footprint of the input's inside,
as the input's bilinear interpolant with zeros beyond it sees it (1 from half a pixel
inside each edge, 0 from half a pixel outside, linear between).

Along the normal of one edge the footprint of an output pixel (a parallelogram spanned by
the inverse map's columns) projects to the sum of two uniform spreads, ``|a|`` and ``|b|``
input pixels wide for the x edges (``|d|`` and ``|e|`` for the y edges), and the bilinear
edge adds a third, one pixel wide. The coverage at signed distance ``t`` (input pixels,
positive inside) is the distribution function of that sum at ``t``; it is computed as that
of two uniforms, the narrow one widened to the same variance by the edge's (``sqrt(w**2 + 1)``):
a trapezoid's distribution function, closed form and a dozen tensor operations. An axis's
two edges multiply, and so do the two axes (exact away from the frame's four corners).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from flowdata.transforms.sampling import AffineMap, Size

__all__ = ["Coverage", "coverage_mask", "coverage_plan", "fully_covered"]

_THIN = 1e-6  # the narrow spread's least width: keeps q = m / w finite for an unturned axis
# how far past the full-coverage point (input pixels, plus this much of the distance) every
# corner must be for the mask to be skipped: the mask's distances are float32 sums, off by
# a few of their last places, and a pixel counts as covered only where they agree
_SURE, _SURE_REL = 1e-2, 1e-5


@dataclass(frozen=True)
class Coverage:
    """One output image's coverage. ``edges`` holds, for the input's four edges (left, top,
    right, bottom), the signed distance inside it of output pixel centre ``(j + 0.5, i + 0.5)``
    as ``(alpha, beta, gamma)``: ``alpha * (j + 0.5) + beta * (i + 0.5) + gamma`` input pixels;
    ``wide`` and ``narrow`` the two spreads of a footprint along each edge's normal."""

    edges: tuple[tuple[float, float, float], ...]
    wide: tuple[float, ...]
    narrow: tuple[float, ...]


def coverage_plan(inverse: AffineMap, size: Size, out: Size) -> Coverage:
    """The :class:`Coverage` of an ``out`` image sampled through ``inverse`` (output point ->
    input point) from an input of ``size``."""
    a, b, c, d, e, f = inverse
    h, w = size
    spreads = []
    for u, v in ((abs(a), abs(b)), (abs(d), abs(e))):
        wide, narrow = max(u, v), math.sqrt(min(u, v) ** 2 + 1.0)  # the edge's ramp: variance 1/12
        spreads.append((max(wide, narrow), max(min(wide, narrow), _THIN)))
    (wx, nx), (wy, ny) = spreads
    edges = ((a, b, c), (d, e, f), (-a, -b, w - c), (-d, -e, h - f))
    return Coverage(edges, (wx, wy, wx, wy), (nx, ny, nx, ny))


def fully_covered(cover: Coverage, out: Size) -> bool:
    """Whether every output pixel's footprint lies wholly inside the input, so that the mask
    would be exactly 1 everywhere (the frame's edges cropped away, as a centre crop after a
    small turn does) and multiplying by it would change nothing. An edge's distance is
    affine in the pixel, so its least value over the output is at one of the four corner
    pixels' centres."""
    corners = [(j, i) for j in (0.5, out[1] - 0.5) for i in (0.5, out[0] - 0.5)]
    for (alpha, beta, gamma), wide, narrow in zip(cover.edges, cover.wide, cover.narrow):
        full = (wide + narrow) / 2.0  # the trapezoid's full-coverage point
        for j, i in corners:
            t = alpha * j + beta * i + gamma
            if t < full + _SURE + _SURE_REL * (abs(alpha * j) + abs(beta * i) + abs(gamma)):
                return False
    return True


def coverage_mask(covers: list[Coverage], out: Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[len(covers), 1, H', W']``: each output pixel's coverage in ``[0, 1]``, computed in
    ``dtype`` (at least float32: distances are in input pixels) and returned in it."""
    work = torch.promote_types(dtype, torch.float32)

    def per(values: list[Any]) -> torch.Tensor:  # [N, 4, 1, 1] or [N, 4, 1, 1, 3]: one per edge
        return torch.tensor(values, dtype=torch.float64).view(len(covers), 4, 1, 1, -1).squeeze(-1).to(work)

    coeffs = per([c.edges for c in covers]).to(device)
    j = (torch.arange(out[1], dtype=torch.float64) + 0.5).to(work).to(device)
    i = (torch.arange(out[0], dtype=torch.float64) + 0.5).to(work).to(device)
    # [N, 4, H', W'], channels first so that every later operation runs along whole rows
    t = (coeffs[..., 0] * j) + (coeffs[..., 1] * i[:, None] + coeffs[..., 2])
    wide, narrow = per([c.wide for c in covers]).to(device), per([c.narrow for c in covers]).to(device)
    # a trapezoid's distribution function, written as its deficit from 1/2 at |t|: with
    # u = flat + narrow - |t| (0 from the full-coverage point on), max(u - narrow, 0) / wide
    # + min(u, narrow)^2 / (2 narrow wide) -- exactly 0 where u is, so a covered pixel's mask
    # is exactly 1 (and an outside one's 0); in place, as few full-size temporaries as can be
    # (each one a fresh allocation)
    flat = (wide - narrow) * 0.5
    u = t.abs().neg_().add_(flat + narrow).clamp_(min=0.0)
    s = torch.minimum(u, narrow).square_().mul_(0.5 / (narrow * wide))
    g = u.sub_(narrow).clamp_(min=0.0).div_(wide).add_(s).neg_().add_(0.5)  # in [0, 1/2]
    cover = torch.copysign(g, t, out=g).add_(0.5)
    mask = cover[:, 0:1] * cover[:, 1:2]
    mask.mul_(cover[:, 2:3]).mul_(cover[:, 3:4])
    return mask.to(dtype)
