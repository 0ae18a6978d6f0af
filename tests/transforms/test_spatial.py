"""flowdata.transforms' spatial transforms and Compose: matrices, fusion, the exact path."""

from __future__ import annotations

import io
import math
import pickle

import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import InterpolationMode

from flowdata.run.caching.passcache import digest
from flowdata.transforms import (
    Affine,
    CenterCrop,
    Compose,
    FeatureTransform,
    HorizontalFlip,
    Normalize,
    Pad,
    RandomAffine,
    RandomCrop,
    RandomHorizontalFlip,
    Resize,
    Rotate,
)


def smooth(h: int = 48, w: int = 48, c: int = 3) -> torch.Tensor:
    """A smooth image: interpolation error is small on it, so fused and unfused compare."""
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    return torch.stack([0.5 + 0.5 * torch.sin(3 * xx + 1.3 * k) * torch.cos(2 * yy - k) for k in range(c)])


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def apply_matrix(x: torch.Tensor, matrix: torch.Tensor, out: tuple[int, int], padding: str = "zeros") -> torch.Tensor:
    """An independent reading of the convention: sample x at M^-1 p for every output pixel
    centre p = (j + 0.5, i + 0.5), normalised so that -1 and 1 are the image's edges."""
    h, w = x.shape[-2:]
    i, j = torch.meshgrid(torch.arange(out[0], dtype=torch.float64), torch.arange(out[1], dtype=torch.float64),
                          indexing="ij")
    p = torch.stack([j + 0.5, i + 0.5, torch.ones_like(i)], -1)
    q = p @ torch.linalg.inv(matrix).T
    grid = torch.stack([2 * q[..., 0] / w - 1, 2 * q[..., 1] / h - 1], -1)[None].float()
    return F.grid_sample(x[None], grid, mode="bilinear", padding_mode=padding, align_corners=False)[0]


# --- matrices --------------------------------------------------------------------------------


def test_as_matrix_of_each_transform() -> None:
    def rows(t: object, size: tuple[int, int], g: torch.Generator | None = None) -> tuple[list[list[float]], tuple[int, int]]:
        m, out = t.as_matrix(size, g)  # type: ignore[attr-defined]
        assert m.dtype == torch.float64 and m.shape == (3, 3) and m[2].tolist() == [0, 0, 1]
        return m[:2].tolist(), out

    assert rows(Resize((20, 10)), (40, 30)) == ([[1 / 3, 0, 0], [0, 0.5, 0]], (20, 10))
    assert rows(Resize(16, short_side=True), (32, 48)) == ([[0.5, 0, 0], [0, 0.5, 0]], (16, 24))
    assert rows(CenterCrop(4), (10, 9)) == ([[1, 0, -2], [0, 1, -3]], (4, 4))
    assert rows(Pad((1, 2, 3, 4)), (10, 10)) == ([[1, 0, 1], [0, 1, 2]], (16, 14))
    assert rows(Pad(2), 10) == ([[1, 0, 2], [0, 1, 2]], (14, 14))
    assert rows(HorizontalFlip(), (5, 8)) == ([[-1, 0, 8], [0, 1, 0]], (5, 8))
    # a quarter turn is snapped to exact zeros and ones (counter-clockwise: +x goes to -y)
    assert rows(Rotate(90), (6, 6)) == ([[0, 1, 0], [-1, 0, 6]], (6, 6))
    m, _ = rows(Rotate(30), (10, 20))
    c, s = math.cos(math.radians(30)), math.sin(math.radians(30))
    assert m[0][:2] == pytest.approx([c, s]) and m[1][:2] == pytest.approx([-s, c])
    # about the centre (10, 5): it stays where it is
    assert m[0][0] * 10 + m[0][1] * 5 + m[0][2] == pytest.approx(10)
    assert m[1][0] * 10 + m[1][1] * 5 + m[1][2] == pytest.approx(5)
    # random ones draw as they do alone: RandomCrop's top then left, one rand for the flip
    m, out = rows(RandomCrop((3, 4)), (10, 12), seeded(7))
    g = seeded(7)
    top, left = int(torch.randint(0, 8, (1,), generator=g)), int(torch.randint(0, 9, (1,), generator=g))
    assert (m, out) == ([[1, 0, -left], [0, 1, -top]], (3, 4))
    flips = {rows(RandomHorizontalFlip(), (4, 4), seeded(s))[0][0][0] for s in range(20)}
    assert flips == {1.0, -1.0}
    a, _ = RandomAffine(30, translate=(0.1, 0.1), scale=(0.5, 2.0), shear=10).as_matrix(32, seeded(3))
    b, _ = RandomAffine(30, translate=(0.1, 0.1), scale=(0.5, 2.0), shear=10).as_matrix(32, seeded(3))
    assert torch.equal(a, b) and not torch.equal(a, RandomAffine(30).as_matrix(32, seeded(4))[0])


@pytest.mark.parametrize("make", [
    lambda: CenterCrop((5, 7)), lambda: Pad((1, 2, 3, 4)), lambda: HorizontalFlip(), lambda: Rotate(90),
    lambda: Rotate(23), lambda: Affine(10, (2, -1), 1.1, (4, 2)), lambda: Resize((70, 60)),
    lambda: RandomCrop(6), lambda: RandomHorizontalFlip(0.5), lambda: RandomAffine(20, (0.1, 0.2), (0.9, 1.1), 5),
])
def test_each_transform_alone_is_its_matrix_applied(make: object) -> None:
    t = make()  # type: ignore[operator]
    x = smooth(20, 24)
    matrix, out = t.as_matrix(x.shape[-2:], seeded(1))
    alone = t(x, seeded(1))
    assert alone.shape[-2:] == out
    # Resize alone is torchvision's (antialiased; an upscale here, so the same bilinear
    # weights), which clamps within the image's edges: border, where nothing is outside
    padding = "border" if isinstance(t, Resize) else "zeros"
    assert torch.allclose(alone, apply_matrix(x, matrix, out, padding), atol=2e-5)
    assert torch.allclose(Compose(t)(x, seeded(1)), alone, atol=2e-5)  # fused, one member


# --- torchvision -------------------------------------------------------------------------------


@pytest.mark.parametrize("degrees", [15.0, -40.0, 90.0, 123.4])
def test_rotate_agrees_with_torchvision(degrees: float) -> None:
    x = smooth(30, 40)
    ours = Rotate(degrees)(x)
    theirs = TF.rotate(x, degrees, interpolation=InterpolationMode.BILINEAR)
    assert (ours - theirs).abs().max() < 1e-4


@pytest.mark.parametrize(("degrees", "translate", "scale", "shear"), [
    (20.0, (0.0, 0.0), 1.0, (0.0, 0.0)),
    (-10.0, (3.0, -2.0), 1.2, (5.0, 3.0)),
    (0.0, (0.0, 0.0), 0.8, (15.0, 0.0)),
])
def test_affine_agrees_with_torchvision(degrees: float, translate: tuple[float, float], scale: float,
                                        shear: tuple[float, float]) -> None:
    x = smooth(32, 36)
    ours = Affine(degrees, translate, scale, shear)(x)
    theirs = TF.affine(x, angle=degrees, translate=list(translate), scale=scale, shear=list(shear),
                       interpolation=InterpolationMode.BILINEAR)
    assert (ours - theirs).abs().max() < 1e-4


def test_quarter_turns_equal_rot90() -> None:
    x = torch.rand(3, 12, 12)
    for k in range(-2, 5):
        assert torch.equal(Rotate(90 * k)(x), torch.rot90(x, k, (-2, -1)))
        assert torch.equal(Compose(Rotate(90 * k))(x), torch.rot90(x, k, (-2, -1)))
    tall = torch.rand(2, 6, 10)
    assert torch.equal(Compose(Rotate(180), Rotate(180), Rotate(180))(tall), torch.rot90(tall, 2, (-2, -1)))


# --- fusion ------------------------------------------------------------------------------------


CHAIN = (Resize(56), Rotate(15), CenterCrop(40), HorizontalFlip())


def test_fused_and_unfused_agree_on_smooth_images() -> None:
    x = smooth(48, 48)
    fused, unfused = Compose(*CHAIN)(x), Compose(*CHAIN, fuse=False)(x)
    assert fused.shape == unfused.shape == (3, 40, 40)
    diff = (fused - unfused).abs()
    assert diff.mean() < 1e-3
    assert diff[:, 6:-6, 6:-6].max() < 2e-3  # the rotated frame's edges blend with the zeros differently


def test_a_chain_that_cancels_gives_the_image_back_when_fused() -> None:
    x = smooth(40, 40)
    chain = (Resize(80), Rotate(20), Rotate(-20), Resize(40))
    fused = Compose(*chain)(x)
    unfused = Compose(*chain, fuse=False)(x)
    assert (fused - x).abs().mean() < 1e-3
    assert (unfused - x).abs().mean() > 1e-2  # two rotations lose the corners, two resizes blur


def test_one_grid_sample_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = F.grid_sample

    def counting(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.nn.functional, "grid_sample", counting)
    x = smooth(48, 48)
    Compose(*CHAIN)(x)
    assert len(calls) == 1
    norm = Normalize([0.5] * 3, [0.2] * 3, dim=-3)
    Compose(Rotate(10), Resize(40), norm, Rotate(-5), CenterCrop(30))(x)
    assert len(calls) == 3  # two runs, Normalize between them


def test_exact_path_slices_and_never_interpolates(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> torch.Tensor:
        raise AssertionError("grid_sample called on an exact run")

    monkeypatch.setattr(torch.nn.functional, "grid_sample", refuse)
    x = torch.rand(3, 20, 24)
    out = Compose(Pad(2), CenterCrop(16), HorizontalFlip(), Rotate(90))(x)
    padded = F.pad(x, (2, 2, 2, 2))  # 24 x 28
    expected = torch.rot90(padded[..., 4:20, 6:22].flip(-1), 1, (-2, -1))
    assert torch.equal(out, expected)
    # a quarter turn of a non-square image keeps its frame (as torchvision's rotate): exact too
    wide = Compose(Rotate(90))(x)
    assert torch.equal(wide, TF.rotate(x, 90.0, interpolation=InterpolationMode.NEAREST))
    # random crops and flips: the slicing the transforms do alone, bit for bit
    aug = (Pad(4), RandomCrop(20), RandomHorizontalFlip())
    for seed in range(6):
        assert torch.equal(Compose(*aug)(x, seeded(seed)), Compose(*aug, fuse=False)(x, seeded(seed)))
    # whole-pixel shifts past the edge, in each padding mode: what grid_sample would give
    monkeypatch.undo()
    for mode in ("zeros", "border", "reflection"):
        theta = torch.tensor([[[1.0, 0.0, -2 * 3 / 24], [0.0, 1.0, 2 * 5 / 20]]])
        grid = F.affine_grid(theta, [1, 3, 20, 24], align_corners=False)
        expected = F.grid_sample(x[None], grid, padding_mode=mode, align_corners=False)[0]
        # (grid_sample's own rounding reaches about 1e-6; the exact path has none)
        assert torch.allclose(Compose(Affine(translate=(3, -5)), padding_mode=mode)(x), expected, atol=1e-5)


def test_reflection_repeats_the_edge_pixel_unlike_torch_reflect() -> None:
    x = torch.arange(5.0).reshape(1, 1, 5)
    assert Compose(Affine(translate=(2, 0)), padding_mode="reflection")(x).flatten().tolist() == [1, 0, 0, 1, 2]
    assert Pad((2, 0, 0, 0), "reflect")(x).flatten().tolist() == [2, 1, 0, 1, 2, 3, 4]


def test_pads_fuse_only_where_grid_sample_matches_them() -> None:
    def runs(c: Compose) -> list[int]:
        return [len(members) if is_run else 0 for is_run, members in c.steps()]

    assert runs(Compose(Pad(3), Rotate(10))) == [2]
    assert runs(Compose(Pad(3, fill=1.0), Rotate(10))) == [0, 1]
    assert runs(Compose(Pad(3, "reflect"), RandomCrop(8), HorizontalFlip())) == [0, 2]
    assert runs(Compose(Pad(3, "replicate"), Rotate(10), padding_mode="border")) == [2]
    assert runs(Compose(Pad(3, "replicate"), Rotate(10))) == [0, 1]
    x = smooth(24, 24)
    # replicate is grid_sample's border: fused equals the unfused chain
    chain = (Pad(5, "replicate"), Rotate(30), CenterCrop(20))
    fused, unfused = Compose(*chain, padding_mode="border")(x), Compose(*chain, padding_mode="border", fuse=False)(x)
    assert (fused - unfused).abs().max() < 1e-4
    # a reflect pad runs on its own, exactly, then the run
    assert torch.equal(Compose(Pad(3, "reflect"), Rotate(10))(x), Rotate(10)(F.pad(x, (3, 3, 3, 3), mode="reflect")))


def test_downscaling_is_antialiased() -> None:
    board = ((torch.arange(256)[:, None] + torch.arange(256)[None]) % 2).float()[None]
    assert Compose(Resize(30))(board).std() < 0.01  # each axis's antialiasing filter
    assert Compose(Resize(30), antialias=False)(board).std() > 0.1  # grid_sample alone aliases
    assert Compose(Resize(30), mode="nearest")(board).std() > 0.1  # label maps are never averaged
    # a run with no rotation or shear is torchvision's antialiased resize (and crop, flip), to rounding
    x = torch.rand(3, 64, 80)
    for size in (16, 30, (20, 50), 100):
        assert torch.allclose(Compose(Resize(size))(x), Resize(size)(x), atol=1e-5)
    fused = Compose(Resize(40, short_side=True), CenterCrop(40), HorizontalFlip())(x)
    assert torch.allclose(fused, Resize((40, 50))(x)[..., :, 5:45].flip(-1), atol=1e-5)
    # a rotation that shrinks: an exact area reduction by the rounded footprint, then one grid_sample
    inside = (..., slice(8, 22), slice(8, 22))  # away from the rotation's zero corners
    assert Compose(Resize(30), Rotate(10))(board)[inside].std() < 0.02
    assert Compose(Resize(30), Rotate(10), antialias=False)(board)[inside].std() > 0.1


def test_nearest_keeps_label_values() -> None:
    labels = torch.randint(0, 3, (1, 30, 34)) * 7
    out = Compose(Rotate(17), Resize((41, 25)), RandomAffine(20, scale=(0.7, 1.3)), mode="nearest")(labels, seeded(0))
    assert out.dtype == torch.int64 and set(out.unique().tolist()) <= {0, 7, 14}
    floats = labels.float() + 0.5
    out = Compose(Rotate(33), Resize(20), mode="nearest", padding_mode="border")(floats)
    assert set(out.unique().tolist()) <= set(floats.unique().tolist())


# --- randomness and batches ----------------------------------------------------------------------


RANDOM = (RandomAffine(25, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=5), RandomCrop(28),
          RandomHorizontalFlip(), Resize(32))


def test_same_seed_same_output_and_fused_unfused_draw_alike() -> None:
    x = smooth(40, 40)
    fused, unfused = Compose(*RANDOM), Compose(*RANDOM, fuse=False)
    assert torch.equal(fused(x, seeded(5)), fused(x, seeded(5)))
    assert not torch.equal(fused(x, seeded(5)), fused(x, seeded(6)))
    for seed in range(4):
        g1, g2 = seeded(seed), seeded(seed)
        a, b = fused(x, g1), unfused(x, g2)
        assert torch.equal(g1.get_state(), g2.get_state())  # the same numbers were drawn
        assert (a - b).abs().mean() < 5e-3


def test_members_get_the_generator_only_when_random() -> None:
    class Noise(FeatureTransform):
        random = True

        def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
            return x + torch.rand(x.shape, generator=generator)

    class Fixed(FeatureTransform):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # takes no generator
            return x * 2

    pipe = Compose(RandomCrop(8), Noise(), Fixed(), RandomHorizontalFlip())
    assert pipe.random and not Compose(Fixed(), Rotate(3)).random
    x = torch.rand(3, 10, 10)
    assert torch.equal(pipe(x, seeded(2)), pipe(x, seeded(2)))


def test_batches_draw_per_sample() -> None:
    batch = torch.stack([smooth(36, 36) * (0.5 + i / 8) for i in range(4)])
    pipe = Compose(*RANDOM)
    g = seeded(9)
    one_by_one = torch.stack([pipe(batch[n], g) for n in range(4)])
    together = pipe(batch, seeded(9))
    assert together.shape == (4, 3, 32, 32)
    assert torch.allclose(together, one_by_one, atol=1e-6)
    assert not torch.allclose(together[0] / together[0].mean(), together[1] / together[1].mean(), atol=1e-2)
    g1, g2 = seeded(9), seeded(9)
    unfused = Compose(*RANDOM, fuse=False)(batch, g1)
    pipe(batch, g2)
    assert torch.equal(g1.get_state(), g2.get_state())  # the same draws, sample by sample
    assert (unfused - together).abs().mean() < 5e-3
    # exact random runs slice every sample; fixed runs share one grid over the batch
    aug = Compose(Pad(2), RandomCrop(36), RandomHorizontalFlip())
    g = seeded(1)
    assert torch.equal(aug(batch, seeded(1)), torch.stack([aug(batch[n], g) for n in range(4)]))
    fixed = Compose(*CHAIN)
    assert torch.allclose(fixed(batch), torch.stack([fixed(b) for b in batch]), atol=1e-6)


# --- pickling, saving, keys ----------------------------------------------------------------------


def test_compose_pickles_saves_and_keys_by_its_arguments() -> None:
    pipe = Compose(Resize(40), Rotate(10), CenterCrop(30), Normalize([0.5] * 3, [0.25] * 3, dim=-3))
    x = smooth(48, 48)
    key = digest(pipe)
    y = pipe(x)
    assert digest(pipe) == key  # what it keeps per input size is no part of its key
    assert torch.allclose(pickle.loads(pickle.dumps(pipe))(x), y)
    buf = io.BytesIO()
    torch.save(pipe, buf)
    buf.seek(0)
    assert torch.allclose(torch.load(buf, weights_only=False)(x), y)
    buf = io.BytesIO()
    torch.save(pipe.state_dict(), buf)
    buf.seek(0)
    fresh = Compose(Resize(40), Rotate(10), CenterCrop(30), Normalize([0.0] * 3, [1.0] * 3, dim=-3))
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    assert torch.allclose(fresh(x), y)
    assert len(pickle.dumps(pipe)) < 4000  # no grid travels with it


# --- errors ---------------------------------------------------------------------------------------


def test_errors_name_the_transform_and_the_fix() -> None:
    x = torch.rand(3, 10, 12)
    with pytest.raises(ValueError, match=r"CenterCrop\(size=\(16, 16\)\): the crop 16x16 is larger than the image "
                                         r"10x12 .*fix: Resize or Pad"):
        Compose(CenterCrop(16))(x)
    with pytest.raises(ValueError, match=r"CenterCrop\(size=\(16, 16\)\): the crop 16x16 is larger"):
        CenterCrop(16)(x)
    with pytest.raises(ValueError, match=r"RandomCrop\(size=\(11, 11\)\): the crop 11x11 is larger"):
        RandomCrop(11)(x, seeded(0))
    with pytest.raises(ValueError, match=r"Compose: expected an image \[C, H, W\] or a batch \[N, C, H, W\], got a "
                                         r"2-D tensor of shape \(10, 12\); fix: add the missing axes"):
        Compose(Rotate(10))(x[0])
    with pytest.raises(ValueError, match=r"Compose: mode='bicubic' is not one of bilinear, nearest"):
        Compose(Rotate(10), mode="bicubic")
    with pytest.raises(ValueError, match=r"padding_mode='reflect' is not one of zeros, border, reflection"):
        Compose(Rotate(10), padding_mode="reflect")
    with pytest.raises(ValueError, match=r"Pad\(padding_mode='symmetric'\): expected one of constant, reflect"):
        Pad(2, "symmetric")
    with pytest.raises(ValueError, match=r"Pad\(padding=-1\): expected sizes of 0 or more"):
        Pad(-1)
    with pytest.raises(ValueError, match=r"reflection needs padding smaller than the image 10x12"):
        Pad(10, "reflect")(x)
    with pytest.raises(ValueError, match=r"Resize\(size=\(8, 8\), short_side=True\): expected the short side's "
                                         r"length as an int"):
        Resize((8, 8), short_side=True)
    with pytest.raises(ValueError, match=r"RandomAffine\(scale=\(0, 1\)\): expected \(min, max\) with 0 < min"):
        RandomAffine(10, scale=(0, 1))
    with pytest.raises(ValueError, match=r"Compose: mode='bilinear' interpolates, which needs a floating-point "
                                         r"image, got torch.uint8; fix: convert it .* or use mode='nearest'"):
        Compose(Rotate(10))(torch.zeros(1, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"Compose: transform 1 is a builtin_function_or_method, expected an nn.Module"):
        Compose(Rotate(10), torch.flip)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Affine\(scale=0\): expected a scale above 0"):
        Affine(scale=0)
    # crops and flips of an integer image need no interpolation: they work in any mode
    assert Compose(CenterCrop(4), HorizontalFlip())(torch.zeros(1, 8, 8, dtype=torch.uint8)).dtype == torch.uint8


# --- antialiasing rotating runs, against a supersampled reference ------------------------------


def supersampled(x: torch.Tensor, run: tuple[torch.nn.Module, ...], n: int = 8,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """The reference: each output pixel the mean of n x n points spread evenly over its
    square, each mapped back through the run's composed matrix (the members' as_matrix)
    onto the input, read there bilinearly with zeros outside (the points in float64)."""
    size = (x.shape[-2], x.shape[-1])
    matrix = torch.eye(3, dtype=torch.float64)
    for t in run:
        m, size = t.as_matrix(size, generator)  # type: ignore[operator]
        matrix = m @ matrix
    inverse = torch.linalg.inv(matrix)
    (oh, ow), (h, w) = size, x.shape[-2:]
    i, j = torch.meshgrid(torch.arange(oh, dtype=torch.float64), torch.arange(ow, dtype=torch.float64), indexing="ij")
    total = torch.zeros(x.shape[0], oh, ow, dtype=torch.float64)
    x4 = x.float()[None]
    for sy in (torch.arange(n, dtype=torch.float64) + 0.5) / n:
        for sx in (torch.arange(n, dtype=torch.float64) + 0.5) / n:
            p = torch.stack([j + sx, i + sy, torch.ones_like(i)], -1) @ inverse.T
            grid = torch.stack([2 * p[..., 0] / w - 1, 2 * p[..., 1] / h - 1], -1)[None]
            total += F.grid_sample(x4, grid.float(), mode="bilinear", padding_mode="zeros", align_corners=False)[0]
    return total / (n * n)


def checkerboard(side: int = 256) -> torch.Tensor:
    return ((torch.arange(side)[:, None] + torch.arange(side)[None]) % 2).float()[None]


def china() -> torch.Tensor:
    datasets = pytest.importorskip("sklearn.datasets")
    return torch.from_numpy(datasets.load_sample_image("china.jpg").copy()).permute(2, 0, 1).float() / 255


def mean_error(y: torch.Tensor, reference: torch.Tensor) -> float:
    assert y.shape == reference.shape
    return float((y.double() - reference).abs().mean())


def test_a_rotating_run_shrinking_by_under_two_is_antialiased_on_a_checkerboard() -> None:
    # Compose(Resize(170), Rotate(15)) shrinks by 1.5: it used to sample the 1-px checkerboard
    # without any filter (std 0.167 inside, where torchvision's resize-then-rotate has 0.005)
    board = checkerboard()
    run = (Resize(170), Rotate(15))
    fused = Compose(*run)(board)
    inside = (..., slice(40, 130), slice(40, 130))  # away from the rotation's zero corners
    assert float(fused[inside].std()) < 0.02
    theirs = TF.rotate(TF.resize(board, [170, 170], antialias=True), 15.0, interpolation=InterpolationMode.BILINEAR)
    reference = supersampled(board, run)
    assert mean_error(fused, reference) <= mean_error(theirs, reference)
    assert mean_error(fused, reference) <= mean_error(Compose(*run, fuse=False)(board), reference)
    # shrinking by 1.11 (230 of 256) is filtered too
    run = (Resize(230), Rotate(15))
    theirs = TF.rotate(TF.resize(board, [230, 230], antialias=True), 15.0, interpolation=InterpolationMode.BILINEAR)
    reference = supersampled(board, run)
    assert mean_error(Compose(*run)(board), reference) <= mean_error(theirs, reference)


@pytest.mark.parametrize("rotation", ["Rotate", "RandomAffine"])
def test_the_fused_photo_chain_is_at_least_as_close_to_the_reference_as_torchvision(rotation: str) -> None:
    # Resize(256) -> a 15-degree turn -> CenterCrop(224) on a real photograph (427 x 640)
    photo = china()
    if rotation == "Rotate":
        turn: torch.nn.Module = Rotate(15)
        angle = 15.0  # counter-clockwise: torchvision's rotate
        g = None

        def draw() -> torch.Generator | None:
            return None
    else:
        turn = RandomAffine(15)

        def draw() -> torch.Generator | None:
            return seeded(4)

        angle = -15.0 + 30.0 * float(torch.rand(6, generator=seeded(4))[0])  # RandomAffine's draw
    run = (Resize(256, short_side=True), turn, CenterCrop(224))
    fused = Compose(*run)(photo, draw())
    tv_turn = TF.rotate if rotation == "Rotate" else (
        lambda y, a, interpolation: TF.affine(y, -a, [0, 0], 1.0, [0.0, 0.0], interpolation=interpolation))
    resized = TF.resize(photo, [256], antialias=True)
    theirs = TF.center_crop(tv_turn(resized, angle if rotation == "Rotate" else -angle,
                                    interpolation=InterpolationMode.BILINEAR), [224, 224])
    reference = supersampled(photo, run, n=6, generator=draw())
    ours, tv = mean_error(fused, reference), mean_error(theirs, reference)
    assert ours <= tv, (ours, tv)
    assert ours <= mean_error(Compose(*run, fuse=False)(photo, draw()), reference)
    assert ours < 0.75 * tv  # not a tie: one interpolation, and half the blur of the second


def tv_resize_rotate(x: torch.Tensor, size: int | tuple[int, int], degrees: float) -> torch.Tensor:
    hw = [size, size] if isinstance(size, int) else list(size)
    return TF.rotate(TF.resize(x, hw, antialias=True), degrees, interpolation=InterpolationMode.BILINEAR)


@pytest.mark.parametrize(("size", "degrees"), [(30, 15.0), (64, 15.0), (30, 37.0), (64, 37.0), (170, 37.0)])
def test_a_rotating_run_on_a_checkerboard_is_no_further_from_the_reference_than_torchvision(
        size: int, degrees: float) -> None:
    # shrunk by 2 or more, the turned frame's edges once faded over half an output pixel
    # (the reference: over the whole footprint), and at 37 degrees and a shrink of 1.5 the
    # 3-tap passed the diagonal Nyquist where the footprint's box inverts it
    board = checkerboard()
    run = (Resize(size), Rotate(degrees))
    reference = supersampled(board, run)
    ours, theirs = mean_error(Compose(*run)(board), reference), mean_error(tv_resize_rotate(board, size, degrees), reference)
    assert ours <= theirs, (ours, theirs)


def test_the_turned_frame_fades_over_each_output_pixel_footprint() -> None:
    # an image of ones: the output is each pixel's coverage, the reference's to 6e-3
    ones = torch.ones(1, 256, 256)
    for run in ((Resize(30), Rotate(15)), (Resize(64), Rotate(37)), (Resize((80, 50)), Affine(20, shear=10))):
        fused = Compose(*run)(ones)
        assert (fused.double() - supersampled(ones, run)).abs().max() < 6e-3
    # other padding modes, and nearest, see no zeros: nothing fades
    for kwargs in ({"padding_mode": "border"}, {"padding_mode": "reflection"}):
        assert torch.allclose(Compose(Resize(30), Rotate(15), **kwargs)(ones), torch.ones(1, 30, 30))  # type: ignore[arg-type]
    nearest = Compose(Resize(30), Rotate(15), mode="nearest")(ones)
    assert set(nearest.unique().tolist()) == {0.0, 1.0}


def test_the_photo_shrunk_much_and_turned_is_closer_to_the_reference_than_torchvision() -> None:
    photo = china()
    for size, degrees in (((40, 60), 15.0), ((64, 96), 37.0)):
        run = (Resize(size), Rotate(degrees))
        reference = supersampled(photo, run)
        ours = mean_error(Compose(*run)(photo), reference)
        assert ours < 0.8 * mean_error(tv_resize_rotate(photo, size, degrees), reference)


# --- Resize's size rule and the centre crop are torchvision's ------------------------------------


def test_resize_follows_torchvision_size_rule() -> None:
    from torchvision.transforms.v2.functional._geometry import _compute_resized_output_size

    sizes = [(427, 640), (640, 427), (480, 640), (333, 500), (1000, 999), (7, 3000), (256, 256), (37, 41), (41, 37)]
    sizes += [(h, w) for h in (1, 31, 97, 224, 511) for w in (2, 63, 224, 385, 999)]
    checked = 0
    for h, w in sizes:
        for n in (1, 8, 32, 224, 256, 383):
            for max_size in (None, n + 1, 300, 384, 1000):
                if max_size is not None and max_size <= n:
                    continue
                _, out = Resize(n, short_side=True, max_size=max_size).as_matrix((h, w))
                assert list(out) == _compute_resized_output_size((h, w), n, max_size), (h, w, n, max_size)
                checked += 1
        for max_size in (1, 50, 640):
            _, out = Resize(None, max_size=max_size).as_matrix((h, w))
            assert list(out) == _compute_resized_output_size((h, w), None, max_size)
    assert checked > 900
    # a 427x640 photograph, and the transform alone gives torchvision's pixels
    photo = torch.rand(3, 427, 640)
    assert Resize(256, short_side=True).as_matrix((427, 640))[1] == (256, 383)
    assert torch.equal(Resize(256, short_side=True)(photo), TF.resize(photo, [256], antialias=True))
    assert torch.equal(Resize(200, short_side=True, max_size=250)(photo),
                       TF.resize(photo, [200], max_size=250, antialias=True))
    with pytest.raises(ValueError, match=r"max_size must be strictly greater than the short side's length 256"):
        Resize(256, short_side=True, max_size=256)
    with pytest.raises(ValueError, match=r"max_size bounds the long side of a short-side resize"):
        Resize((256, 300), max_size=400)
    with pytest.raises(ValueError, match=r"size=None resizes the long side to max_size"):
        Resize(None)


@pytest.mark.parametrize(("h", "w"), [(427, 640), (640, 427), (48, 48), (50, 77), (333, 500), (97, 98)])
def test_short_side_resize_and_centre_crop_equal_torchvision(h: int, w: int, tmp_path: object) -> None:
    from pathlib import Path

    from PIL import Image

    import flowdata_modules.image as image

    x = torch.rand(3, h, w)
    for n in (32, 45):
        ours = Compose(Resize(n, short_side=True), CenterCrop(n))(x)
        theirs = TF.center_crop(TF.resize(x, [n], antialias=True), [n, n])
        assert (ours - theirs).abs().max() < 1e-5, (h, w, n)
        assert torch.equal(CenterCrop(n)(x), TF.center_crop(x, [n, n]))
    # the image module's resized: the decoded file, then torchvision's resize and centre crop
    pixels = (torch.rand(h, w, 3) * 255).to(torch.uint8).numpy()
    path = Path(str(tmp_path)) / "photo.png"
    Image.fromarray(pixels).save(path)
    decoded = torch.from_numpy(pixels).permute(2, 0, 1).float() / 255
    resized = image.resized({"path": str(path)}, image_size=32)
    assert (resized - TF.center_crop(TF.resize(decoded, [32], antialias=True), [32, 32])).abs().max() < 1e-5


def test_a_prefiltered_batch_equals_its_samples_one_by_one() -> None:
    # each sample's draw gives its own shrink, so its own prefilter; the batch groups them
    x = torch.rand(4, 3, 64, 80)
    for augment in (Compose(Resize(30), RandomAffine(20, scale=(0.5, 1.5))),
                    # filtered at the input's pixels
                    Compose(Resize((50, 60)), RandomAffine(30, translate=(0.3, 0.3), scale=(0.7, 1.3)), CenterCrop(40))):
        batch = augment(x, [seeded(s) for s in range(4)])
        assert torch.allclose(batch, torch.stack([augment(x[n], seeded(n)) for n in range(4)]), atol=1e-6)
    for fixed in (Compose(Resize(30), Rotate(10)), Compose(Resize((50, 60)), Rotate(10), CenterCrop(40))):
        assert torch.allclose(fixed(x), torch.stack([fixed(s) for s in x]), atol=1e-6)  # one plan (cropped) for all
    # under zeros a run filters only the rows and columns its grid reads, random or not: the same
    # values as filtering all of them (under "border", which filters all; the frame is cropped away)
    run = (Resize((50, 60)), Rotate(10), CenterCrop(40))
    whole = Compose(*run, padding_mode="border")(x[0])
    assert torch.allclose(Compose(*run)(x[0]), whole, atol=2e-5)
    flip = RandomHorizontalFlip(0.0)  # random, p=0: no flip
    assert torch.allclose(Compose(*run, flip)(x[0], seeded(0)), whole, atol=2e-5)


def test_a_random_batch_equals_its_samples_alone_to_the_last_bit() -> None:
    # each sample filters its own window (a 3-tap at the input's pixels), or the whole image (an
    # interpolate first, shrunk by 2 or more); masked where the frame shows, not where it is cropped away
    x = torch.rand(6, 3, 90, 120)
    for augment in (Compose(Resize((60, 80)), RandomAffine(25, scale=(0.8, 1.2)), CenterCrop(40)),
                    Compose(RandomAffine(30, translate=(0.2, 0.2), scale=(0.3, 1.2)), Resize((40, 50))),
                    Compose(Resize((70, 80)), RandomAffine(10), CenterCrop(50), RandomHorizontalFlip())):
        gens = [seeded(s) for s in range(6)]
        batch = augment(x, gens)
        alone = torch.stack([augment(x[n], seeded(n)) for n in range(6)])
        assert torch.equal(batch, alone)
        g = seeded(7)
        assert torch.equal(augment(x, seeded(7)), torch.stack([augment(x[n], g) for n in range(6)]))


@pytest.mark.parametrize("crop", [60, 100, 120, 126, 128, 130, 132, 140])
def test_the_coverage_mask_is_skipped_only_where_it_would_change_nothing(crop: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # a turn whose frame's edges are cropped away samples as "border" and skips the mask (all
    # ones there): the same bits as applying it. Crops about 130 of a 160 turned by 15 degrees
    # put the corners' footprints just inside, on or just outside the frame's edge.
    from flowdata.transforms import compose

    x = torch.rand(2, 3, 200, 200)
    members = [(Resize(160), Rotate(15), CenterCrop(crop)), (Resize(160), RandomAffine(15), CenterCrop(crop))]
    masks: list[int] = []
    real = compose.coverage_mask

    def counting(covers: list[object], *args: object) -> torch.Tensor:
        masks.append(len(covers))
        return real(covers, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(compose, "coverage_mask", counting)
    fixed = Compose(*members[0])(x)
    if crop <= 120:  # well inside the turned frame: skipped
        assert masks == []
    if crop >= 140:  # the corners' footprints reach the frame's edge: masked
        assert masks == [1]
    fast = [fixed, Compose(*members[1])(x, [seeded(0), seeded(1)])]
    monkeypatch.setattr(compose, "fully_covered", lambda cover, out: False)
    masks.clear()
    slow = [Compose(*members[0])(x), Compose(*members[1])(x, [seeded(0), seeded(1)])]
    assert len(masks) == 3  # the mask applied everywhere, as before the skip
    assert torch.equal(slow[0], fast[0]) and torch.equal(slow[1], fast[1])
