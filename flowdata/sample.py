"""Built-in per-sample values: ``sample_index`` and ``sample_rng``.

``sample_rng`` is a ``torch.Generator`` seeded from (seed, epoch, sample index) alone, so a
sample's randomness does not depend on which worker runs it, how many workers there are,
or where a run was resumed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["sample_seed", "make_rng"]

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """SplitMix64 finaliser: spreads nearby integers over 64 bits."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for one sample, independent for every (seed, epoch, index)."""
    return _mix(_mix(_mix(seed) ^ epoch) ^ index) >> 1


def make_rng(seed: int, epoch: int, index: int) -> Any:
    """A ``torch.Generator`` seeded for one sample (imports torch on first use)."""
    import torch

    gen = torch.Generator()
    gen.manual_seed(sample_seed(seed, epoch, index))
    return gen
