"""A two-pass flow for the rank tests: features, their statistics (pass 1), normalised (pass 2).

``feature`` logs every sample it computes to ``$FD_RANK_LOG-<pid>.log`` (so a test sees
which rank, in which process, computed what) and fails for the samples that
``$FD_FAIL`` lists for this rank (``rank:index,rank:index``; ``*`` for every rank), or
sleeps ``$FD_SLOW`` seconds per sample; the rank ``$FD_KILL`` names (``rank:index``) kills
itself with SIGKILL on that sample (a rank that dies without a word). ``item`` yields
``$FD_EXTRA`` more items on the rank it names (``rank:count``: a source that lists more
items on one rank).
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import torch

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Vocab, Vocabulary, Welford


def item(n: int) -> Parallel[int]:
    extra = os.environ.get("FD_EXTRA")
    if extra and extra.split(":")[0] == os.environ.get("RANK", "0"):
        n += int(extra.split(":")[1])
    yield from range(n)


def _fails(index: int) -> bool:
    rank = os.environ.get("RANK", "0")
    for one in filter(None, os.environ.get("FD_FAIL", "").split(",")):
        who, at = one.split(":")
        if int(at) == index and who in ("*", rank):
            return True
    return False


def feature(item: int, sample_index: int) -> torch.Tensor:
    log = os.environ.get("FD_RANK_LOG")
    if log:
        with open(f"{log}-{os.getpid()}.log", "a") as f:
            f.write(f"{sample_index}\n")
    if os.environ.get("FD_SLOW"):
        time.sleep(float(os.environ["FD_SLOW"]))
    kill = os.environ.get("FD_KILL")
    if kill and kill == f"{os.environ.get('RANK', '0')}:{sample_index}":
        os.kill(int(os.environ.get("FD_RANK_PID", os.getpid())), signal.SIGKILL)  # the rank, from a worker too
    if _fails(sample_index):
        raise OSError(f"transient read error on sample {sample_index}")
    rng = np.random.default_rng(item)
    return torch.from_numpy(rng.normal(item % 7, 1 + item % 3, size=(3,)).astype(np.float32))


def word(item: int) -> str:
    return f"w{item % 11}"


@reduce(Welford, dim=0)
def stats(feature: Collect[torch.Tensor]) -> Stats:
    ...


@reduce(Vocabulary)
def words(word: Collect[str]) -> Vocab:
    ...


def normalized(feature: torch.Tensor, stats: Stats) -> torch.Tensor:
    return (feature - stats.mean) / stats.std


def ident(item: int) -> int:
    return item


def largest(feature: Collect[torch.Tensor]) -> float:
    """A plain Collect function (not a reduction): every rank computes it over every value."""
    return max(float(f.max()) for f in feature)


def scaled(feature: torch.Tensor, largest: float) -> torch.Tensor:
    return feature / largest


def word_id(word: str, words: Vocab) -> int:
    return words.tokens.index(word) if word in words.tokens else -1
