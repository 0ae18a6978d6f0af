"""Normalisation: pass 1 computes the mean, pass 2 reads it per sample."""

import math

from flowdata import Collect, Parallel

CASES = [{"values": [1.0, 2.0, 4.0]}, {"values": [10000.0, 10001.0, 10002.0]}, {"values": [float(i % 7) for i in range(1000)]}]
OUTPUTS = ["mean", "variance", "normalized_max"]


def value(values: list[float]) -> Parallel[float]:
    return list(values)


def total(value: Collect[float]) -> float:
    return math.fsum(value)


def size(value: Collect[float]) -> int:
    return sum(1 for _ in value)


def mean(total: float, size: int) -> float:
    return total / size


def deviation(value: float, mean: float) -> float:
    return value - mean


def variance(deviation: Collect[float], size: int) -> float:
    return math.fsum(d * d for d in deviation) / size


def normalized(deviation: float, variance: float) -> float:
    return deviation / math.sqrt(variance) if variance else 0.0


def normalized_max(normalized: Collect[float]) -> float:
    return max(normalized)


def _oracle(values: list[float]) -> dict[str, object]:
    m = math.fsum(values) / len(values)
    var = math.fsum((v - m) ** 2 for v in values) / len(values)
    return {
        "mean": m,
        "variance": var,
        "normalized_max": max((v - m) / math.sqrt(var) if var else 0.0 for v in values),
    }


LOADER_OUTPUTS = ["normalized", "deviation"]


def _loader_oracle(values: list[float]) -> dict[str, list[object]]:
    m = math.fsum(values) / len(values)
    var = math.fsum((v - m) ** 2 for v in values) / len(values)
    return {
        "normalized": [(v - m) / math.sqrt(var) if var else 0.0 for v in values],
        "deviation": [v - m for v in values],
    }
