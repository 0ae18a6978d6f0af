"""Did-you-mean: the name a misspelt one was probably meant to be.

``difflib``'s ratio alone misses the two slips people make most in short names: two
letters swapped (``wrod`` for ``word``: a ratio of 0.75) and another case (``Word`` for
``word``: 0.75 too), while its cutoff of 0.8 is what keeps unrelated short names apart.
So a name is near another when they differ only in case, or by one swap of neighbouring
letters (in any case), or when ``difflib`` finds them close; the first rule that finds a
candidate wins, so an exact case match beats a swap, which beats a ratio.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["near", "plural_pair"]


def _swapped(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with two neighbouring letters swapped."""
    if len(a) != len(b) or a == b:
        return False
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]


def near(name: str, candidates: Iterable[str], cutoff: float = 0.8) -> str | None:
    """The candidate ``name`` was most likely meant to be, or None.

    Args:
        name: The name that matched nothing.
        candidates: The names it may have been meant as (``name`` itself is never one).
        cutoff: ``difflib``'s ratio, for names that are neither another case nor a swap.
    """
    pool = [c for c in candidates if c != name]
    low = name.lower()
    for c in pool:
        if c.lower() == low:
            return c
    for c in pool:
        if _swapped(low, c.lower()):
            return c
    close = difflib.get_close_matches(name, pool, n=1, cutoff=cutoff)
    return close[0] if close else None


def plural_pair(a: str, b: str) -> bool:
    """``row``/``rows``, ``batch``/``batches``: one name is the other's plural (a source
    ``url(urls)`` reading its plural input is an idiom, not a typo)."""
    short, long = sorted((a, b), key=len)
    return long in (short + "s", short + "es") or (short.endswith("y") and long == short[:-1] + "ies")
