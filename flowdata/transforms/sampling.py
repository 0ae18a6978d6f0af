"""Resampling an image through an affine map: the 3x3 maths, the exact path, the grid path.

Coordinates are continuous pixel coordinates: ``x`` is the column, ``y`` the row, the image
``[..., H, W]`` covers ``[0, W] x [0, H]`` and pixel ``(i, j)`` has its centre at
``(j + 0.5, i + 0.5)`` (``align_corners=False``, the convention of ``interpolate`` and
torchvision). A map says what a transform *does*: it takes an input point to the output
point. An output image is made by sampling the input at ``inverse(map)(p)`` for every output
pixel centre ``p``.

Maps are 6-tuples of Python floats ``(a, b, c, d, e, f)``, ``x' = a x + b y + c`` and
``y' = d x + e y + f`` (the first two rows of the 3x3 matrix): composing them costs well
under a microsecond, where 3x3 tensors would cost tens (this runs once per sample).

:func:`exact_plan` recognises a map that takes pixel centres to pixel centres with no
scaling (crops, flips, pads, translations by whole pixels, quarter turns): such a map is
carried out by slicing and flipping, with no interpolation. A map with no rotation or shear
is carried out, antialiased, by one filter matrix per axis (:func:`axis_weights`,
:func:`separable`: torchvision's antialiased resize, at any offset, flipped or padded).
Every other map is carried out by one ``grid_sample`` (:func:`grid_theta`,
:func:`sample_grid`), after an optional antialiasing prefilter
(:mod:`~flowdata.transforms.prefilter`) wherever it shrinks the image, by however little.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "IDENTITY", "AffineMap", "ExactPlan", "Size", "compose", "exact_plan", "grid_theta", "invert",
    "outside_margins", "sample_grid", "scale", "take_exact", "to_matrix", "translate", "zero_margins",
]

AffineMap = tuple[float, float, float, float, float, float]
Size = tuple[int, int]  # (height, width), as in a tensor's shape

IDENTITY: AffineMap = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
MODES = ("bilinear", "nearest")
PADDING_MODES = ("zeros", "border", "reflection")
_EPS = 1e-6  # how far from a whole number a coordinate may be and still count as exact


def translate(tx: float, ty: float) -> AffineMap:
    """The map moving every point by ``(tx, ty)``."""
    return (1.0, 0.0, float(tx), 0.0, 1.0, float(ty))


def scale(sx: float, sy: float) -> AffineMap:
    """The map scaling x by ``sx`` and y by ``sy`` about the origin (the top-left corner)."""
    return (float(sx), 0.0, 0.0, 0.0, float(sy), 0.0)


def compose(after: AffineMap, before: AffineMap) -> AffineMap:
    """``after`` applied to the result of ``before`` (the matrix product ``after @ before``)."""
    a2, b2, c2, d2, e2, f2 = after
    a1, b1, c1, d1, e1, f1 = before
    return (a2 * a1 + b2 * d1, a2 * b1 + b2 * e1, a2 * c1 + b2 * f1 + c2,
            d2 * a1 + e2 * d1, d2 * b1 + e2 * e1, d2 * c1 + e2 * f1 + f2)


def invert(m: AffineMap, who: str = "the map") -> AffineMap:
    """The inverse map; a ValueError for a singular one (a scale of 0)."""
    a, b, c, d, e, f = m
    det = a * e - b * d
    if abs(det) < 1e-12:
        raise ValueError(f"{who}: the matrix is singular (determinant {det:g}), so no image can be sampled "
                         "through it; fix: give a non-zero scale")
    ia, ib, id_, ie = e / det, -b / det, -d / det, a / det
    return (ia, ib, -(ia * c + ib * f), id_, ie, -(id_ * c + ie * f))


def to_matrix(m: AffineMap) -> torch.Tensor:
    """The 3x3 float64 matrix of a map (what ``as_matrix`` returns)."""
    a, b, c, d, e, f = m
    return torch.tensor([[a, b, c], [d, e, f], [0.0, 0.0, 1.0]], dtype=torch.float64)


def cos_sin(degrees: float) -> tuple[float, float]:
    """``cos`` and ``sin`` of an angle in degrees, exact for multiples of 90 (``cos(pi/2)``
    is 6e-17 in floats, which would turn a quarter turn into an interpolation)."""
    quarter = degrees / 90.0
    if abs(quarter - round(quarter)) < 1e-12:
        return ((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))[round(quarter) % 4]
    rad = math.radians(degrees)
    return math.cos(rad), math.sin(rad)


# --- the exact path -------------------------------------------------------------------------


@dataclass(frozen=True)
class ExactPlan:
    """``out[i, j] = x[row, col]``: ``row = row0 + row_step * k`` and ``col = col0 + col_step * l``,
    with ``(k, l) = (i, j)``, or ``(j, i)`` when ``transpose`` (a quarter turn)."""

    transpose: bool
    row0: int
    row_step: int
    col0: int
    col_step: int
    out: Size


def _whole(v: float) -> int | None:
    r = round(v)
    return int(r) if abs(v - r) < _EPS else None


def exact_plan(inverse: AffineMap, out: Size) -> ExactPlan | None:
    """The slicing that carries out ``inverse`` (output point -> input point) exactly, or None
    when it does not take every output pixel centre to an input pixel centre."""
    c, f = inverse[2], inverse[5]
    a, b, d, e = _whole(inverse[0]), _whole(inverse[1]), _whole(inverse[3]), _whole(inverse[4])
    if a is None or b is None or d is None or e is None:
        return None
    if abs(a) + abs(b) != 1 or abs(d) + abs(e) != 1 or abs(a) + abs(d) != 1:
        return None  # not a signed permutation: a scale or a shear
    # a centre (k + 0.5) lands on col = step * k + (c + 0.5 * step - 0.5): whole, or not exact
    if a != 0:  # no transpose: col follows j, row follows i
        col0, row0 = _whole(c + 0.5 * a - 0.5), _whole(f + 0.5 * e - 0.5)
        transpose, row_step, col_step = False, e, a
    else:  # col follows i, row follows j
        col0, row0 = _whole(c + 0.5 * b - 0.5), _whole(f + 0.5 * d - 0.5)
        transpose, row_step, col_step = True, d, b
    if col0 is None or row0 is None:
        return None
    return ExactPlan(transpose, row0, row_step, col0, col_step, out)


def _span(start: int, step: int, n: int) -> tuple[int, int]:
    end = start + step * (n - 1)
    return min(start, end), max(start, end)


def _boundary_index(lo: int, hi: int, n: int, padding_mode: str, device: torch.device) -> torch.Tensor:
    idx = torch.arange(lo, hi + 1, device=device)
    if padding_mode == "border":
        return idx.clamp_(0, n - 1)
    # grid_sample's reflection at align_corners=False reflects about the pixel edges: the
    # edge pixel repeats (a b c | c b a), with period 2n
    m = idx.remainder(2 * n)
    return torch.where(m < n, m, 2 * n - 1 - m)


def take_exact(x: torch.Tensor, plan: ExactPlan, padding_mode: str) -> torch.Tensor:
    """Carries out an exact plan on ``[..., H, W]`` by slicing, flipping and padding: no
    interpolation, so the values are the input's, bit for bit. A plan inside the image gives
    a view (as slicing does), or a flipped copy."""
    h, w = x.shape[-2], x.shape[-1]
    n_rows, n_cols = (plan.out[1], plan.out[0]) if plan.transpose else plan.out
    r_lo, r_hi = _span(plan.row0, plan.row_step, n_rows)
    c_lo, c_hi = _span(plan.col0, plan.col_step, n_cols)
    if r_lo >= 0 and c_lo >= 0 and r_hi < h and c_hi < w:
        y = x[..., r_lo : r_hi + 1, c_lo : c_hi + 1]
    elif padding_mode == "zeros":
        inside = x[..., max(r_lo, 0) : max(min(r_hi, h - 1) + 1, 0), max(c_lo, 0) : max(min(c_hi, w - 1) + 1, 0)]
        rows_in, cols_in = inside.shape[-2], inside.shape[-1]
        top, left = min(max(-r_lo, 0), n_rows), min(max(-c_lo, 0), n_cols)
        pad = (left, n_cols - cols_in - left, top, n_rows - rows_in - top)
        y = F.pad(inside, pad)  # constant 0: works for every dtype
    else:
        y = x.index_select(-2, _boundary_index(r_lo, r_hi, h, padding_mode, x.device))
        y = y.index_select(-1, _boundary_index(c_lo, c_hi, w, padding_mode, x.device))
    flips = [dim for dim, step in ((-2, plan.row_step), (-1, plan.col_step)) if step < 0]
    if flips:
        y = y.flip(flips)
    return y.transpose(-1, -2) if plan.transpose else y


# --- the grid path --------------------------------------------------------------------------


def axis_aligned(inverse: AffineMap) -> bool:
    """Whether a map has no rotation or shear (each output axis reads one input axis)."""
    return abs(inverse[1]) < 1e-12 and abs(inverse[3]) < 1e-12


def axis_weights(step: float, offset: float, n_out: int, n_in: int, padding_mode: str, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """``[n_out, n_in]``: one axis of a map with no rotation or shear, as a filter matrix.

    Output pixel ``o`` samples the input at ``u = step * (o + 0.5) + offset`` (continuous
    coordinates, centres at ``+0.5``) with a triangle ``max(1, |step|)`` pixels wide on each
    side -- linear interpolation when enlarging, and, when shrinking, the antialiasing filter
    of torchvision's (and PIL's) antialiased bilinear resize -- its weights normalised over
    the pixels inside the input, so the edges repeat (``"border"``). Under ``"zeros"`` an
    output pixel whose centre lies outside ``[0, n_in]`` is 0 (a pad's).
    """
    t = step * (torch.arange(n_out, dtype=torch.float64) + 0.5) + offset - 0.5  # in index space
    radius = max(1.0, abs(step))
    i = torch.arange(n_in, dtype=torch.float64)
    w = (1.0 - (i[None, :] - t[:, None]).abs() / radius).clamp_(min=0.0)
    sums = w.sum(1, keepdim=True)
    far = sums[:, 0] == 0  # beyond the triangle's reach of any pixel: the nearest edge pixel
    if bool(far.any()):
        w[far, t[far].round().clamp(0, n_in - 1).long()] = 1.0
        sums[far] = 1.0
    w /= sums
    if padding_mode == "zeros":
        w[(t < -0.5 - _EPS) | (t > n_in - 0.5 + _EPS)] = 0.0
    return w.to(dtype=dtype, device=device)


def separable(x: torch.Tensor, wy: torch.Tensor, wx: torch.Tensor) -> torch.Tensor:
    """``wy @ x @ wx.T`` on ``[..., H, W]``, the cheaper axis first."""
    oh, h = wy.shape
    ow, w = wx.shape
    if oh * h * w + oh * w * ow <= h * w * ow + oh * h * ow:
        return torch.matmul(torch.matmul(wy, x), wx.T)
    return torch.matmul(wy, torch.matmul(x, wx.T))


def grid_theta(inverse: AffineMap, size: Size, out: Size) -> tuple[float, float, float, float, float, float]:
    """``inverse`` in ``affine_grid``'s normalised coordinates (``-1`` and ``1`` at the image's
    edges): ``N_in @ inverse @ N_out^-1``."""
    h, w = size
    oh, ow = out
    a, b, c, d, e, f = compose(inverse, (ow / 2.0, 0.0, ow / 2.0, 0.0, oh / 2.0, oh / 2.0))
    return (2.0 * a / w, 2.0 * b / w, 2.0 * c / w - 1.0, 2.0 * d / h, 2.0 * e / h, 2.0 * f / h - 1.0)


def _margins(step: float, offset: float, n_out: int, extent: int) -> tuple[int, int]:
    def outside(k: int) -> bool:
        q = step * (k + 0.5) + offset
        return q < -_EPS or q > extent + _EPS

    before = 0
    while before < n_out and outside(before):
        before += 1
    after = 0
    while after < n_out - before and outside(n_out - 1 - after):
        after += 1
    return before, after


def outside_margins(inverse: AffineMap, size: Size, out: Size) -> tuple[int, int, int, int] | None:
    """For a map with no rotation or shear: how many output rows (top, bottom) and columns
    (left, right) have their centres outside the input's extent ``[0, W] x [0, H]``; None for
    any other map.

    ``grid_sample``'s zeros blend a point within half a pixel inside the edge with the zeros
    beyond it, which darkens the edges of an upscaled image (``interpolate`` clamps there).
    Such a map is sampled with ``"border"`` instead, and these rows and columns (a pad's) set
    to 0: the unfused resize-then-pad, exactly at its edges.
    """
    a, b, c, d, e, f = inverse
    if abs(b) > 1e-12 or abs(d) > 1e-12:
        return None
    top, bottom = _margins(e, f, out[0], size[0])
    left, right = _margins(a, c, out[1], size[1])
    return (top, bottom, left, right)


def zero_margins(y: torch.Tensor, margins: tuple[int, int, int, int]) -> torch.Tensor:
    """Sets the margins' rows and columns of ``[..., H, W]`` to 0, in place."""
    top, bottom, left, right = margins
    h, w = y.shape[-2], y.shape[-1]
    if top:
        y[..., :top, :] = 0
    if bottom:
        y[..., h - bottom :, :] = 0
    if left:
        y[..., :, :left] = 0
    if right:
        y[..., :, w - right :] = 0
    return y


def make_grid(thetas: list[tuple[float, ...]], out: Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The sampling grid ``[len(thetas), H', W', 2]`` of normalised maps: ``affine_grid``'s
    (to float rounding), as the broadcast sum of a row and a column: a third of its time on
    224 x 224, no slower on 30 x 30 (it multiplies a ``[H' W', 3]`` base grid by each map,
    allocating both). Every operation is elementwise,
    so a sample's grid has the same bits alone as in a batch."""
    oh, ow = out
    theta = torch.tensor(thetas, dtype=dtype, device=device).view(-1, 2, 3, 1, 1).unbind(2)
    # pixel centres in normalised coordinates, (2k + 1 - n) / n: whole numbers until the division
    xs = torch.arange(1 - ow, ow, 2, dtype=dtype, device=device).div_(ow)
    ys = torch.arange(1 - oh, oh, 2, dtype=dtype, device=device).div_(oh)[:, None]
    grid = torch.empty(len(thetas), oh, ow, 2, dtype=dtype, device=device)
    torch.add(theta[0] * xs, (theta[1] * ys).add_(theta[2]), out=grid.movedim(-1, 1))  # x and y at once
    return grid


def sample_grid(x: torch.Tensor, grid: torch.Tensor, mode: str, padding_mode: str) -> torch.Tensor:
    """``grid_sample`` of ``[N, C, H, W]`` (a grid of one image serves the whole batch).
    An integer image is sampled in float64 and rounded back (only ``mode="nearest"`` gets
    here with one, so the values are the input's)."""
    if grid.shape[0] == 1 and x.shape[0] > 1:
        grid = grid.expand(x.shape[0], -1, -1, -1)
    if x.is_floating_point():
        return F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=False)
    y = F.grid_sample(x.double(), grid.double(), mode=mode, padding_mode=padding_mode, align_corners=False)
    return y.round_().to(x.dtype)


def check_image(x: torch.Tensor, who: str) -> None:
    """A ValueError unless ``x`` is ``[C, H, W]`` or ``[N, C, H, W]``."""
    if x.dim() not in (3, 4):
        raise ValueError(f"{who}: expected an image [C, H, W] or a batch [N, C, H, W], got a {x.dim()}-D tensor "
                         f"of shape {tuple(x.shape)}; fix: add the missing axes (x[None] for one channel)")


def check_interpolable(x: torch.Tensor, mode: str, who: str) -> None:
    """A ValueError for an integer image that would need bilinear interpolation."""
    if mode != "nearest" and not x.is_floating_point():
        raise ValueError(f"{who}: mode={mode!r} interpolates, which needs a floating-point image, got {x.dtype}; "
                         "fix: convert it (x.float() / 255), or use mode='nearest' for a label map")
