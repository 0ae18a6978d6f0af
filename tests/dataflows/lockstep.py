"""Several Collect parameters of one node arrive in lockstep; several Collect nodes share a pass."""

from flowdata import Collect, Parallel

CASES = [{"words": ["a", "bb", "ccc"]}, {"words": [f"w{i}" * (i % 5) for i in range(700)]}]
OUTPUTS = ["pairs", "longest", "lengths_sum", "order_list"]


def word(words: list[str]) -> Parallel[str]:
    yield from words


def length(word: str) -> int:
    return len(word)


def upper(word: str) -> str:
    return word.upper()


def pairs(upper: Collect[str], length: Collect[int]) -> list[tuple[str, int]]:
    return list(zip(upper, length, strict=True))


def longest(length: Collect[int]) -> int:
    return max(length, default=0)


def lengths_sum(length: Collect[int]) -> int:
    return sum(length)


def order(sample_index: int, word: str) -> str:
    return f"{sample_index}:{word}"


def order_list(order: Collect[str]) -> list[str]:
    return list(order)


def _oracle(words: list[str]) -> dict[str, object]:
    return {
        "pairs": [(w.upper(), len(w)) for w in words],
        "longest": max((len(w) for w in words), default=0),
        "lengths_sum": sum(len(w) for w in words),
        "order_list": [f"{i}:{w}" for i, w in enumerate(words)],
    }


LOADER_OUTPUTS = ["upper", "length", "order"]


def _loader_oracle(words: list[str]) -> dict[str, list[object]]:
    return {
        "upper": [w.upper() for w in words],
        "length": [len(w) for w in words],
        "order": [f"{i}:{w}" for i, w in enumerate(words)],
    }
