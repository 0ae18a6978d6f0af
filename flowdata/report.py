"""What a run did: samples seen and skipped (with reasons), time and calls per node.

``execute(..., report=Report())`` fills the report it is given; the training iterator
keeps its own as ``loader.report`` (pass 1 and every epoch). :func:`first_time` is what a
module uses to say a warning once per process instead of once per loader.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from collections.abc import Hashable, Iterable
from typing import Any

from flowdata.errors import InputError, TooManySkipped

__all__ = ["Report", "Skip", "TooManySkipped", "check_max_skipped", "first_time"]

_CACHE_FIELDS = ("hits", "misses", "bytes_read", "bytes_written", "not_cached")


@dataclass(frozen=True)
class Skip:
    """One sample left out under ``on_error="skip"``.

    Attributes:
        index: Sample index in its group.
        item: Short repr of the source item.
        node: The node that raised.
        error: ``Type: message`` of the exception.
        group: The group.
        pass_: The pass the sample was computed in (a training epoch runs the group's last pass).
    """

    index: int
    item: str
    node: str
    error: str
    group: str
    pass_: int

    def __str__(self) -> str:
        return f"sample {self.index} ({self.item}) at node '{self.node}': {self.error}"


@dataclass
class Report:
    """Counts and timings of a run. Mutable: a run adds to it as chunks arrive.

    Attributes:
        seen: Samples computed, per group.
        skipped: Samples left out, in the order they were found.
        node_seconds: Time spent in each per-sample node (summed over workers) and each
            batch node (in the process that iterates the loader).
        node_calls: Samples each per-sample node ran for (a batch node: the samples of
            its batches).
        max_skipped: The limit: a count (int) or a fraction of the samples seen (float).
        cache: Per cached node (``cache=``): ``hits``, ``misses``, ``bytes_read``,
            ``bytes_written`` and ``not_cached`` (values past ``cache_max_bytes``).
        padded: Rows a loader delivered that repeat a sample to even out the ranks
            (``dataloader(even_batches=True)``, the default, under several ranks); they are
            counted in ``seen`` too.
    """

    seen: dict[str, int] = field(default_factory=dict)
    skipped: list[Skip] = field(default_factory=list)
    node_seconds: dict[str, float] = field(default_factory=dict)
    node_calls: dict[str, int] = field(default_factory=dict)
    max_skipped: int | float | None = None
    cache: dict[str, dict[str, int]] = field(default_factory=dict)
    padded: int = 0

    def add_cache(self, counts: dict[str, list[int]]) -> None:
        """Adds one chunk's sample-cache counts (per node: hits, misses, bytes read, bytes
        written, not cached)."""
        for name, values in counts.items():
            mine = self.cache.setdefault(name, dict.fromkeys(_CACHE_FIELDS, 0))
            for k, v in zip(_CACHE_FIELDS, values, strict=True):
                mine[k] += v

    def add_node(self, name: str, seconds: float, samples: int) -> None:
        """Adds one call of a node over ``samples`` samples (a batch node's, on one batch)."""
        self.node_seconds[name] = self.node_seconds.get(name, 0.0) + seconds
        self.node_calls[name] = self.node_calls.get(name, 0) + samples

    def add(self, group: str, delivered: int, node_seconds: dict[str, float], skips: list[Skip]) -> None:
        """Adds one chunk's figures; raises :class:`TooManySkipped` past the limit."""
        self.seen[group] = self.seen.get(group, 0) + delivered + len(skips)
        for name, seconds in node_seconds.items():
            self.node_seconds[name] = self.node_seconds.get(name, 0.0) + seconds
            self.node_calls[name] = self.node_calls.get(name, 0) + delivered
        if skips:  # the common case, no skip, costs nothing more per chunk
            known = {(s.group, s.index) for s in self.skipped}
            self.skipped.extend(s for s in skips if (s.group, s.index) not in known)
            self.check(total=None)

    def check(self, total: int | None) -> None:
        """Raises when the skips exceed ``max_skipped`` (a fraction is of ``total`` when given,
        else of the samples seen so far, once at least 1/fraction samples were seen)."""
        limit = self.max_skipped
        if limit is None or not self.skipped:
            return
        n = len(self.skipped)
        if isinstance(limit, float):
            base = total if total is not None else sum(self.seen.values())
            if total is None and base * limit < 1:
                return  # too few samples yet to judge a fraction
            over = n > limit * base
            what = f"{limit:.1%} of {base} samples"
        else:
            over = n > limit
            what = f"{limit}"
        if over:
            first = "\n".join(f"  {s}" for s in self.skipped[:5])
            raise TooManySkipped(
                f"{n} samples skipped, more than max_skipped={what}:\n{first}"
                + ("\n  ..." if n > 5 else "")
                + "\n  fix: repair the data, or raise max_skipped if these losses are acceptable"
            )

    def summary(self) -> str:
        """One line: samples seen and skipped, and the slowest nodes."""
        seen = sum(self.seen.values())
        slow = sorted(self.node_seconds.items(), key=lambda kv: -kv[1])[:3]
        timing = ", ".join(f"{name} {sec:.3f}s" for name, sec in slow)
        cached = ", ".join(f"{name} {c['hits']} hits / {c['misses']} misses" for name, c in self.cache.items())
        return (f"{seen} samples, {len(self.skipped)} skipped" + (f"; slowest: {timing}" if timing else "")
                + (f"; cache: {cached}" if cached else ""))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for logs and the picture overlay)."""
        return {
            "seen": dict(self.seen),
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
            "node_seconds": dict(self.node_seconds),
            "node_calls": dict(self.node_calls),
            "cache": {k: dict(v) for k, v in self.cache.items()},
            "padded": self.padded,
        }


def check_max_skipped(value: object) -> int | float | None:
    """A ``max_skipped=`` argument: None, an int count >= 0, or a float fraction from 0 to 1;
    anything else is an :class:`~flowdata.errors.InputError`, before anything runs."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    if isinstance(value, float) and 0.0 <= value <= 1.0:
        return value
    raise InputError(
        f"max_skipped={value!r}: expected an int >= 0 (a count of samples), a float from 0.0 to 1.0 (a fraction "
        "of the samples seen), or None for no limit"
    )


# What this process has said once already. It lives in flowdata, not in the module that
# warns, so that the set a node's code reaches is flowdata's (keyed by flowdata's version in
# a cache key), not a module-level object of the user's modules whose contents change as the
# program runs.
_SAID: set[Hashable] = set()


def first_time(keys: Iterable[Hashable]) -> bool:
    """Whether any of ``keys`` is new in this process (all of them are remembered): a
    module's warning said once per process, not once per loader or epoch."""
    new = [k for k in keys if k not in _SAID]
    _SAID.update(new)
    return bool(new)
