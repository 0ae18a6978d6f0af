"""Reducers for streaming statistics, and the contract they follow.

``Welford`` (mean, std, var, min, max, count), ``Vocabulary``, ``Count``, ``MinMax`` and
``Histogram``, each mergeable and reproducible; see :mod:`flowdata.reduce` for the
contract a user-written reducer follows.
"""

from flowdata.reduce import BLOCK, Reducer
from flowdata.stats.counting import Count, Histogram, HistogramCounts, MinMax, Range, Vocab, Vocabulary
from flowdata.stats.welford import Stats, StatsError, Welford

__all__ = [
    "BLOCK",
    "Count",
    "Histogram",
    "HistogramCounts",
    "MinMax",
    "Range",
    "Reducer",
    "Stats",
    "StatsError",
    "Vocab",
    "Vocabulary",
    "Welford",
]
