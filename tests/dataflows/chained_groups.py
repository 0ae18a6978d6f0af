"""A source that takes Collect[...] closes one group and opens the next."""

from flowdata import Collect, Parallel

CASES = [{"sentences": ["a bb", "ccc dddd eeeee", ""]}, {"sentences": [" ".join("x" * (j % 6 + 1) for j in range(i % 9)) for i in range(200)]}]
OUTPUTS = ["sentence_count", "long_word_total", "bucket_sizes"]


def sentence(sentences: list[str]) -> Parallel[str]:
    yield from sentences


def words(sentence: str) -> list[str]:
    return sentence.split()


def sentence_count(sentence: Collect[str]) -> int:
    return sum(1 for _ in sentence)


def word_item(words: Collect[list[str]], min_length: int = 3) -> Parallel[str]:
    """Closes the sentence group and opens a group of long words."""
    for ws in words:
        for w in ws:
            if len(w) >= min_length:
                yield w


def word_length(word_item: str) -> int:
    return len(word_item)


def long_word_total(word_length: Collect[int]) -> int:
    return sum(word_length)


def bucket_sizes(word_length: Collect[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for n in word_length:
        out[n] = out.get(n, 0) + 1
    return dict(sorted(out.items()))


def _oracle(sentences: list[str]) -> dict[str, object]:
    long_words = [w for s in sentences for w in s.split() if len(w) >= 3]
    buckets: dict[int, int] = {}
    for w in long_words:
        buckets[len(w)] = buckets.get(len(w), 0) + 1
    return {
        "sentence_count": len(sentences),
        "long_word_total": sum(len(w) for w in long_words),
        "bucket_sizes": dict(sorted(buckets.items())),
    }
