"""A small bundled dataflow: readings from synthetic sensors, normalised in two passes.

The source yields one reading per sample; pass 1 computes the mean and spread with
Collect nodes; pass 2 normalises every reading with them and collects a summary. It is
what the README's main job runs until the media modules exist::

    flowdata run flowdata_modules.example --outputs summary --input n=1000
"""

from __future__ import annotations

import math

from flowdata import Collect, Parallel


def readings(n: int = 1000, seed: int = 7) -> Parallel[tuple[int, float]]:
    """Yields ``n`` (sensor, value) pairs from a deterministic generator."""
    state = seed
    for i in range(n):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        noise = (state >> 11) / 2**53 - 0.5
        yield i % 4, 20.0 + 5.0 * math.sin(i / 50.0) + noise


def value(readings: tuple[int, float]) -> float:
    """The measured value of one reading."""
    return readings[1]


def sensor(readings: tuple[int, float]) -> int:
    """The sensor that took one reading."""
    return readings[0]


def count(value: Collect[float]) -> int:
    """Number of readings."""
    return sum(1 for _ in value)


def total(value: Collect[float]) -> float:
    """Sum of all values."""
    return math.fsum(value)


def mean(total: float, count: int) -> float:
    """Mean value."""
    return total / count if count else 0.0


def squared_deviation(value: float, mean: float) -> float:
    """Pass 2: the squared deviation of one value from the mean."""
    return (value - mean) ** 2


def std(squared_deviation: Collect[float], count: int) -> float:
    """Standard deviation (two-pass, exact)."""
    return math.sqrt(math.fsum(squared_deviation) / count) if count else 0.0


def normalized(value: float, mean: float, std: float) -> float:
    """Pass 3: the value in units of standard deviations."""
    return (value - mean) / std if std else 0.0


def per_sensor_max(sensor: Collect[int], normalized: Collect[float]) -> dict[int, float]:
    """The largest normalised value of each sensor (two Collect parameters in lockstep)."""
    best: dict[int, float] = {}
    for s, z in zip(sensor, normalized):
        best[s] = max(best.get(s, -math.inf), z)
    return dict(sorted(best.items()))


def summary(count: int, mean: float, std: float, per_sensor_max: dict[int, float]) -> dict[str, object]:
    """Everything above, as one dictionary."""
    return {
        "count": count,
        "mean": round(mean, 6),
        "std": round(std, 6),
        "per_sensor_max": {k: round(v, 4) for k, v in per_sensor_max.items()},
    }
