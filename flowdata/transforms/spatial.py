"""Spatial transforms: each says what it does to ``[..., C, H, W]`` as a 3x3 matrix.

``as_matrix(size, generator=None)`` returns ``(matrix, out_size)``: the float64 matrix taking
an input point ``(x, y, 1)`` (x the column, y the row, pixel centres at ``+0.5``) to the
output point, and the output's ``(height, width)`` for an input of ``size``. A random
transform draws its parameters from ``generator`` (pass ``sample_rng``); the draws are the
same whether it runs alone or inside :class:`~flowdata.transforms.Compose`, fused or not.

Alone, each transform runs as itself: ``Resize`` is torchvision's antialiased resize, crops
slice, flips flip, ``Pad`` is ``torch.nn.functional.pad``, and ``Rotate``, ``Affine`` and
``RandomAffine`` sample through their matrix (bilinear, zeros outside, as torchvision's
``rotate``/``affine``; exactly, by slicing, for quarter turns that land on pixel centres).
``Compose`` fuses runs of them into one ``grid_sample``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from flowdata.transforms.features import FeatureTransform
from flowdata.transforms.prefilter import resample
from flowdata.transforms.sampling import (
    IDENTITY, MODES, PADDING_MODES, AffineMap, Size, check_image, compose, cos_sin, scale, to_matrix, translate,
)

__all__ = [
    "Affine", "CenterCrop", "HorizontalFlip", "Pad", "RandomAffine", "RandomCrop", "RandomHorizontalFlip",
    "Resize", "Rotate", "SpatialTransform",
]

def _pair(size: int | Sequence[int], who: str) -> Size:
    if isinstance(size, int):
        return (size, size)
    pair = tuple(int(s) for s in size)
    if len(pair) != 2:
        raise ValueError(f"{who}: expected a size as an int or (height, width), got {size!r}")
    return (pair[0], pair[1])


class SpatialTransform(FeatureTransform):
    """Base of the spatial transforms: ``as_matrix`` says what the transform does.

    A subclass implements :meth:`as_matrix` (or, as flowdata's own do, the faster
    ``_affine``, which returns the matrix's first two rows as six floats);
    ``forward`` then samples through it. ``Compose`` reads either.
    """

    def as_matrix(self, size: int | Sequence[int], generator: torch.Generator | None = None
                  ) -> tuple[torch.Tensor, Size]:
        """``(matrix, out_size)`` for an input of ``size`` (height, width): a float64 3x3 tensor
        taking input points ``(x, y, 1)`` to output points, and the output's (height, width)."""
        m, out = self._affine(_pair(size, type(self).__name__), generator)
        return to_matrix(m), out

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        if type(self).as_matrix is SpatialTransform.as_matrix:
            raise NotImplementedError(f"{type(self).__name__}: a SpatialTransform implements as_matrix(size, generator)")
        matrix, out = self.as_matrix(size, generator)
        rows = matrix.double().tolist()
        return (rows[0][0], rows[0][1], rows[0][2], rows[1][0], rows[1][1], rows[1][2]), (int(out[0]), int(out[1]))

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.run_alone(x, generator)

    def run_alone(self, x: torch.Tensor, generator: torch.Generator | None = None, mode: str = "bilinear",
              padding_mode: str = "zeros") -> torch.Tensor:
        """This transform alone on ``[C, H, W]`` or ``[N, C, H, W]`` (one draw for the whole
        tensor), sampling with ``mode`` and ``padding_mode`` where it interpolates (what
        ``Compose(fuse=False)`` calls; ``forward`` is ``run_alone`` with the defaults)."""
        name = type(self).__name__
        check_image(x, name)
        m, out = self._affine((x.shape[-2], x.shape[-1]), generator)
        return resample(x, m, out, mode, padding_mode, who=name)


class Resize(SpatialTransform):
    """Resizes ``[..., C, H, W]`` to ``size`` (bilinear, antialiased; torchvision's maths).

    Args:
        size: ``(height, width)``, or an int for a square; with ``short_side=True``, the
            length of the short side, the long side keeping the aspect ratio by
            torchvision's rule (``int(size * long / short)``: truncated, so a 427 x 640
            image resized to 256 is 256 x 383, as torchvision's ``resize(256)``); None with
            ``max_size``: the long side to ``max_size``, as torchvision's ``resize(None,
            max_size=...)``.
        short_side: Whether ``size`` is the short side's length.
        max_size: With ``short_side=True`` (or ``size=None``), the most the long side may
            be: a longer one is brought to ``max_size``, the short side shrunk in proportion
            (truncated), exactly as torchvision's ``max_size``.
    """

    def __init__(self, size: int | tuple[int, int] | None, short_side: bool = False, max_size: int | None = None):
        super().__init__()
        who = f"Resize(size={size!r}, short_side={short_side}, max_size={max_size!r})"
        if size is None:
            if not isinstance(max_size, int):
                raise ValueError(f"{who}: size=None resizes the long side to max_size, which must be an int; "
                                 "fix: give max_size, or a size")
            short_side = True
        elif short_side and not isinstance(size, int):
            raise ValueError(f"Resize(size={size!r}, short_side=True): expected the short side's length as an int; "
                             "fix: Resize(n, short_side=True), or Resize((height, width))")
        elif max_size is not None and not short_side:
            raise ValueError(f"{who}: max_size bounds the long side of a short-side resize; fix: "
                             "Resize(n, short_side=True, max_size=m), or no max_size with a fixed size")
        if isinstance(size, int) and max_size is not None and max_size <= size:
            raise ValueError(f"{who}: max_size must be strictly greater than the short side's length {size} "
                             "(as torchvision's); fix: a larger max_size")
        self.size = None if size is None else _pair(size, type(self).__name__)
        self.short_side = short_side
        self.max_size = max_size
        # torchvision takes about a second to import: do it where the transform is built
        # (usually the main process, before workers fork and inherit it), not per worker.
        import torchvision.transforms.v2.functional  # noqa: F401

    def out_size(self, size: Size) -> Size:
        """The output's (height, width) for an input of ``size``: torchvision's
        ``_compute_resized_output_size``, its float operations in its order."""
        if not self.short_side:
            assert self.size is not None
            return (int(self.size[0]), int(self.size[1]))
        h, w = size
        short, long = (w, h) if w <= h else (h, w)
        if self.size is None:
            assert self.max_size is not None
            new_short, new_long = int(self.max_size * short / long), self.max_size
        else:
            requested = int(self.size[0])
            new_short, new_long = requested, int(requested * long / short)
            if self.max_size is not None and new_long > self.max_size:
                new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        return (new_h, new_w)

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        out = self.out_size(size)
        return scale(out[1] / size[1], out[0] / size[0]), out

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        import torchvision.transforms.v2.functional as TF

        out = self.out_size((x.shape[-2], x.shape[-1]))
        return TF.resize(x, list(out), antialias=True)  # type: ignore[no-any-return]

    def run_alone(self, x: torch.Tensor, generator: torch.Generator | None = None, mode: str = "bilinear",
              padding_mode: str = "zeros") -> torch.Tensor:
        if mode == "bilinear":
            return self.forward(x)
        # nearest: pixel centres to the nearest centre, as grid_sample's nearest does
        out = self.out_size((x.shape[-2], x.shape[-1]))
        x4 = x if x.dim() == 4 else x[None]
        y = F.interpolate(x4 if x4.is_floating_point() else x4.double(), size=out, mode="nearest-exact")
        y = y if x.is_floating_point() else y.to(x.dtype)
        return y if x.dim() == 4 else y[0]


def _check_fits(who: str, crop: Size, size: Size) -> None:
    if crop[0] > size[0] or crop[1] > size[1]:
        raise ValueError(f"{who}: the crop {crop[0]}x{crop[1]} is larger than the image {size[0]}x{size[1]} "
                         "(height x width); fix: Resize or Pad the image first, or crop less")


class CenterCrop(SpatialTransform):
    """Crops the centre ``size`` (height, width; an int for a square) of ``[..., H, W]``, at
    torchvision's ``center_crop`` offsets."""

    def __init__(self, size: int | tuple[int, int]):
        super().__init__()
        self.size = _pair(size, type(self).__name__)

    def _anchor(self, size: Size) -> tuple[int, int]:
        """``(top, left)``: torchvision's ``int(round((H - h) / 2))``, which rounds half to even
        (an odd margin of 127 puts 64 on the left, one of 125 puts 62)."""
        h, w = self.size
        _check_fits(f"CenterCrop(size={self.size})", (h, w), size)
        return int(round((size[0] - h) / 2.0)), int(round((size[1] - w) / 2.0))

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        top, left = self._anchor(size)
        return translate(-left, -top), (self.size[0], self.size[1])

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        h, w = self.size
        top, left = self._anchor((x.shape[-2], x.shape[-1]))
        return x[..., top : top + h, left : left + w]


class RandomCrop(SpatialTransform):
    """Crops a random ``size`` window of ``[..., H, W]``, drawn from ``generator``: the top
    row, then the left column, each one ``torch.randint``."""

    random = True

    def __init__(self, size: int | tuple[int, int]):
        super().__init__()
        self.size = _pair(size, type(self).__name__)

    def _draw(self, size: Size, generator: torch.Generator | None) -> tuple[int, int]:
        h, w = self.size
        _check_fits(f"RandomCrop(size={self.size})", (h, w), size)
        top = int(torch.randint(0, size[0] - h + 1, (1,), generator=generator))
        left = int(torch.randint(0, size[1] - w + 1, (1,), generator=generator))
        return top, left

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        top, left = self._draw(size, generator)
        return translate(-left, -top), (self.size[0], self.size[1])

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        h, w = self.size
        top, left = self._draw((x.shape[-2], x.shape[-1]), generator)
        return x[..., top : top + h, left : left + w]


_PAD_MODES = ("constant", "reflect", "replicate")


class Pad(SpatialTransform):
    """Pads ``[..., C, H, W]`` on its four sides.

    Args:
        padding: An int for every side, ``(left_right, top_bottom)``, or ``(left, top, right,
            bottom)``, as torchvision's ``pad``.
        padding_mode: ``"constant"`` (``fill``), ``"reflect"`` (about the edge pixels' centres:
            ``c b | a b c``, torch's ``reflect``) or ``"replicate"`` (the edge pixel repeated).
        fill: The value of ``"constant"`` padding.
    """

    def __init__(self, padding: int | Sequence[int], padding_mode: str = "constant", fill: float = 0.0):
        super().__init__()
        self.padding = padding if isinstance(padding, int) else tuple(padding)
        self.padding_mode = padding_mode
        self.fill = float(fill)
        if padding_mode not in _PAD_MODES:
            raise ValueError(f"Pad(padding_mode={padding_mode!r}): expected one of {', '.join(_PAD_MODES)}")
        if min(self.sides()) < 0:
            raise ValueError(f"Pad(padding={padding!r}): expected sizes of 0 or more; fix: crop to remove pixels")

    def sides(self) -> tuple[int, int, int, int]:
        """``(left, top, right, bottom)``."""
        p = self.padding
        if isinstance(p, int):
            return (p, p, p, p)
        if len(p) == 2:
            return (p[0], p[1], p[0], p[1])
        if len(p) == 4:
            return (p[0], p[1], p[2], p[3])
        raise ValueError(f"Pad(padding={p!r}): expected an int, (left_right, top_bottom) or (left, top, right, bottom)")

    def fused_padding(self) -> str | None:
        """The ``grid_sample`` padding mode this pad equals (``"zeros"`` for constant 0,
        ``"border"`` for replicate), or None (reflect, another fill): then it cannot join a
        fused run, and ``Compose`` runs it on its own."""
        if self.padding_mode == "constant":
            return "zeros" if self.fill == 0.0 else None
        return "border" if self.padding_mode == "replicate" else None

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        left, top, right, bottom = self.sides()
        return translate(left, top), (size[0] + top + bottom, size[1] + left + right)

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        left, top, right, bottom = self.sides()
        if self.padding_mode == "constant":
            return F.pad(x, (left, right, top, bottom), value=self.fill)
        check_image(x, f"Pad(padding_mode={self.padding_mode!r})")
        if self.padding_mode == "reflect" and (max(left, right) >= x.shape[-1] or max(top, bottom) >= x.shape[-2]):
            raise ValueError(f"Pad(padding={self.padding!r}, padding_mode='reflect'): reflection needs padding "
                             f"smaller than the image {x.shape[-2]}x{x.shape[-1]}; fix: pad less, or use "
                             "padding_mode='replicate'")
        if not x.is_floating_point():
            return F.pad(x.double(), (left, right, top, bottom), mode=self.padding_mode).to(x.dtype)
        return F.pad(x, (left, right, top, bottom), mode=self.padding_mode)

    def run_alone(self, x: torch.Tensor, generator: torch.Generator | None = None, mode: str = "bilinear",
              padding_mode: str = "zeros") -> torch.Tensor:
        return self.forward(x)


class HorizontalFlip(SpatialTransform):
    """Flips ``[..., W]`` left-right."""

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        return (-1.0, 0.0, float(size[1]), 0.0, 1.0, 0.0), size

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return x.flip(-1)


class RandomHorizontalFlip(SpatialTransform):
    """Flips ``[..., W]`` left-right with probability ``p``, drawn from ``generator`` (one
    ``torch.rand``)."""

    random = True

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = float(p)

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        if float(torch.rand(1, generator=generator)) < self.p:
            return (-1.0, 0.0, float(size[1]), 0.0, 1.0, 0.0), size
        return IDENTITY, size

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        if float(torch.rand(1, generator=generator)) < self.p:
            return x.flip(-1)
        return x


def _about_centre(size: Size, linear: tuple[float, float, float, float], shift: tuple[float, float] = (0.0, 0.0)
                  ) -> AffineMap:
    """``p = L (q - c) + c + shift`` with ``c`` the image's centre ``(W / 2, H / 2)``."""
    a, b, d, e = linear
    cx, cy = size[1] / 2.0, size[0] / 2.0
    return compose(translate(cx + shift[0], cy + shift[1]), compose((a, b, 0.0, d, e, 0.0), translate(-cx, -cy)))


class Rotate(SpatialTransform):
    """Rotates ``[..., C, H, W]`` by ``degrees`` about its centre, counter-clockwise for
    positive degrees (as torchvision's ``rotate``), keeping its size; multiples of 90 that
    land on pixel centres (any square image, or an even height + width) are exact."""

    def __init__(self, degrees: float):
        super().__init__()
        self.degrees = float(degrees)

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        cos, sin = cos_sin(self.degrees)
        # y points down: counter-clockwise on screen takes the right (+x) to the top (-y)
        return _about_centre(size, (cos, sin, -sin, cos)), size


def _shear_pair(shear: float | Sequence[float]) -> tuple[float, float]:
    if isinstance(shear, (int, float)):
        return (float(shear), 0.0)
    s = tuple(float(v) for v in shear)
    return (s[0], s[1]) if len(s) == 2 else (s[0], s[0])


def _affine_map(size: Size, degrees: float, shift: tuple[float, float], zoom: float,
                shear: tuple[float, float]) -> AffineMap:
    """torchvision's affine, ``T C RSS C^-1`` with ``RSS = R(a) S(s) SHy(sy) SHx(sx)`` (``a``
    clockwise), in the formulas of its ``_get_inverse_affine_matrix(inverted=False)``."""
    cos_sy, _ = cos_sin(shear[1])
    cos_sx, sin_sx = cos_sin(shear[0])
    cos_a_sy, sin_a_sy = cos_sin(degrees - shear[1])
    cos_a, sin_a = cos_sin(degrees)
    tan_sx = sin_sx / cos_sx
    a = cos_a_sy / cos_sy
    b = -(a * tan_sx + sin_a)
    c = sin_a_sy / cos_sy
    d = cos_a - c * tan_sx
    return _about_centre(size, (a * zoom, b * zoom, c * zoom, d * zoom), shift)


class Affine(SpatialTransform):
    """Rotation, translation, scale and shear about the centre, keeping the size, as
    torchvision's ``affine``: ``degrees`` clockwise (torchvision's ``affine`` and ``rotate``
    turn opposite ways; ``Rotate`` follows ``rotate``), ``translate`` in pixels ``(x, y)``,
    ``shear`` in degrees (one value for x, or ``(x, y)``)."""

    def __init__(self, degrees: float = 0.0, translate: tuple[float, float] = (0.0, 0.0), scale: float = 1.0,
                 shear: float | tuple[float, float] = 0.0):
        super().__init__()
        if scale <= 0:
            raise ValueError(f"Affine(scale={scale}): expected a scale above 0")
        self.degrees = float(degrees)
        self.translate = (float(translate[0]), float(translate[1]))
        self.scale = float(scale)
        self.shear = _shear_pair(shear)

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        return _affine_map(size, self.degrees, self.translate, self.scale, self.shear), size


def _range(value: float | Sequence[float] | None, who: str, symmetric: bool = True) -> tuple[float, float] | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{who}: a single value is a range (-v, v), so it must be 0 or more, got {value}")
        return (-float(value), float(value))
    v = tuple(float(x) for x in value)
    if len(v) != 2 or v[0] > v[1]:
        raise ValueError(f"{who}: expected a number or a (min, max) pair with min <= max, got {value!r}")
    return (v[0], v[1])


class RandomAffine(SpatialTransform):
    """A random :class:`Affine` per sample, its parameters drawn from ``generator``, as
    torchvision's ``RandomAffine`` (same ranges; translations are not rounded to pixels).

    Args:
        degrees: ``d`` for an angle in ``(-d, d)``, or ``(min, max)``; clockwise, as ``Affine``.
        translate: ``(fx, fy)``: a shift up to ``fx`` of the width and ``fy`` of the height.
        scale: ``(min, max)``.
        shear: ``s`` for an x shear in ``(-s, s)``, ``(min, max)`` for x, or ``(xmin, xmax,
            ymin, ymax)``.

    Every call draws six numbers (one ``torch.rand(6)``), whatever is configured, so the
    stream of draws does not depend on which ranges are set.
    """

    random = True

    def __init__(self, degrees: float | tuple[float, float], translate: tuple[float, float] | None = None,
                 scale: tuple[float, float] | None = None, shear: float | Sequence[float] | None = None):
        super().__init__()
        self.degrees = _range(degrees, f"RandomAffine(degrees={degrees!r})")
        if translate is not None and not all(0.0 <= t <= 1.0 for t in translate):
            raise ValueError(f"RandomAffine(translate={translate!r}): expected fractions of the size in [0, 1]")
        self.translate = None if translate is None else (float(translate[0]), float(translate[1]))
        if scale is not None and (len(scale) != 2 or not 0 < scale[0] <= scale[1]):
            raise ValueError(f"RandomAffine(scale={scale!r}): expected (min, max) with 0 < min <= max")
        self.scale = None if scale is None else (float(scale[0]), float(scale[1]))
        if shear is not None and not isinstance(shear, (int, float)) and len(shear) == 4:
            self.shear: tuple[tuple[float, float], tuple[float, float]] | None = (
                (float(shear[0]), float(shear[1])), (float(shear[2]), float(shear[3])))
        else:
            x_range = _range(shear, f"RandomAffine(shear={shear!r})")
            self.shear = None if x_range is None else (x_range, (0.0, 0.0))

    def _affine(self, size: Size, generator: torch.Generator | None) -> tuple[AffineMap, Size]:
        u = torch.rand(6, generator=generator).tolist()

        def pick(r: tuple[float, float] | None, t: float, default: float) -> float:
            return default if r is None else r[0] + (r[1] - r[0]) * t

        fx, fy = self.translate or (0.0, 0.0)
        shift = ((2 * u[1] - 1) * fx * size[1], (2 * u[2] - 1) * fy * size[0])
        shear_x, shear_y = self.shear or (None, None)
        shear = (pick(shear_x, u[4], 0.0), pick(shear_y, u[5], 0.0))
        return _affine_map(size, pick(self.degrees, u[0], 0.0), shift, pick(self.scale, u[3], 1.0), shear), size


def check_mode(who: str, mode: str, padding_mode: str) -> None:
    """A ValueError for a sampling mode or padding mode ``grid_sample`` does not know."""
    if mode not in MODES:
        raise ValueError(f"{who}: mode={mode!r} is not one of {', '.join(MODES)}")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"{who}: padding_mode={padding_mode!r} is not one of {', '.join(PADDING_MODES)} "
                         "(grid_sample's; Pad takes constant, reflect and replicate)")
