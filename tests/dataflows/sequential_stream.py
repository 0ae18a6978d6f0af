"""A Sequential source: samples processed one at a time, in order; Collect sees them in order."""

from flowdata import Collect, Sequential

CASES = [{"n": 0}, {"n": 5}, {"n": 300}]
OUTPUTS = ["prefix_sums", "last"]


def tick(n: int) -> Sequential[int]:
    for i in range(n):
        yield i * 3 % 11


def scaled(tick: int, factor: int = 2) -> int:
    return tick * factor


def prefix_sums(scaled: Collect[int]) -> list[int]:
    out, acc = [], 0
    for s in scaled:
        acc += s
        out.append(acc)
    return out


def last(tick: Collect[int]) -> int | None:
    value = None
    for value in tick:
        pass
    return value


def _oracle(n: int) -> dict[str, object]:
    ticks = [i * 3 % 11 for i in range(n)]
    sums, acc = [], 0
    for t in ticks:
        acc += 2 * t
        sums.append(acc)
    return {"prefix_sums": sums, "last": ticks[-1] if ticks else None}


LOADER_OUTPUTS = ["scaled"]


def _loader_oracle(n: int) -> dict[str, list[object]]:
    return {"scaled": [2 * (i * 3 % 11) for i in range(n)]}
