"""What a process has said once already (warnings that would repeat with each loader).

It lives in flowdata, not in the module that warns, so that the set a node's code reaches
is flowdata's (keyed by flowdata's version in a cache key), not a module-level object of
the user's modules whose contents change as the program runs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

__all__ = ["first_time"]

_SEEN: set[Hashable] = set()


def first_time(keys: Iterable[Hashable]) -> bool:
    """Whether any of ``keys`` is new in this process (all of them are remembered)."""
    new = [k for k in keys if k not in _SEEN]
    _SEEN.update(new)
    return bool(new)
