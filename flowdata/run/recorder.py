"""The recorder: where the outcome of computing samples becomes an error or a skip record.

:class:`Recorder` is the one place where that happens, for every way samples are
computed -- a chunk of a pass on any executor, a ``Sequential`` sample, a batch of a
loader's epoch: it applies the ``on_error`` policy, keeps which samples were skipped (so
every later pass and epoch leaves them out alike), logs each skip once, adds the sample
cache's counts and says its warnings, and fills the :class:`~flowdata.report.Report`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeVar

from flowdata.errors import InputError, NodeError, SampleError
from flowdata.report import Report, Skip
from flowdata.run.caching.passcache import say
from flowdata.run.kernel import Failure

__all__ = ["Computed", "OnError", "Recorder", "failure_error", "on_error_mode"]

_log = logging.getLogger("flowdata")

OnError = Literal["raise", "skip"]


class Computed(Protocol):
    """What computing samples together gives back, wherever it ran: a
    :class:`~flowdata.run.kernel.ChunkResult`, or the loader's batch made of one."""

    @property
    def indices(self) -> Sequence[int]: ...
    @property
    def node_seconds(self) -> dict[str, float]: ...
    @property
    def skipped(self) -> list[Failure]: ...
    @property
    def failure(self) -> Failure | None: ...
    @property
    def worker(self) -> str: ...
    @property
    def cache(self) -> dict[str, list[int]]: ...
    @property
    def notes(self) -> list[tuple[str, str, str]]: ...


C = TypeVar("C", bound=Computed)


def on_error_mode(value: object) -> OnError:
    """``on_error=`` checked once, where a call begins."""
    if value == "raise" or value == "skip":
        return value
    raise InputError(f"on_error={value!r}: expected 'raise' or 'skip'")


class Recorder:
    """Turns computed samples into report entries, skip records or errors (one policy).

    Args:
        report: Where counts, timings and skips go.
        on_error: ``"raise"``: a failing sample is a ``SampleError``; ``"skip"``: it is
            left out of every pass and epoch alike, logged once and reported.
    """

    def __init__(self, report: Report, on_error: OnError = "raise"):
        self.report = report
        self.on_error = on_error
        self._skips: dict[str, set[int]] = {}
        self._logged: set[tuple[str, int]] = set()
        self.on_samples: Callable[[int], None] | None = None  # progress, per chunk

    @property
    def skip(self) -> bool:
        """Whether failing samples are left out."""
        return self.on_error == "skip"

    def skipped(self, group: str) -> frozenset[int]:
        """The samples of ``group`` skipped so far."""
        return frozenset(self._skips.get(group, ()))

    def skips_of(self, group: str) -> list[Skip]:
        """The skip records of ``group`` so far (what a pass-cache entry keeps)."""
        return [s for s in self.report.skipped if s.group == group]

    def restore(self, skips: Sequence[Skip], when: str = "when the cached pass ran") -> None:
        """Takes skips found elsewhere (a pass loaded from the cache, other ranks), as if they
        happened in this run."""
        fresh = [s for s in skips if s.index not in self._skips.get(s.group, ())]
        for s in fresh:
            self._skips.setdefault(s.group, set()).add(s.index)
            self._logged.add((s.group, s.index))
        if fresh:
            _log.info("%d samples skipped %s are left out again", len(fresh), when)
            self.report.skipped.extend(fresh)
            self.report.check(total=None)

    def failed(self, group: str, pass_: int, failure: Failure, worker: str = "main", counted: bool = False) -> None:
        """Records one failed sample: raises under ``"raise"``; under ``"skip"`` the sample is
        skipped (``counted``: it was counted as seen already, as a value a reduction in this
        process could not fold)."""
        if self.skip and not failure.fatal:
            self.record(group, pass_, -1 if counted else 0, {}, [failure], None, worker)
        else:
            self.record(group, pass_, 0, {}, [], failure, worker)

    def check(self, group: str, pass_: int, result: C) -> C:
        """Records computed samples -- a chunk of a pass, or a batch of a loader's epoch --
        and what the sample cache did for them; raises their failure, if they have one."""
        if result.cache:
            self.report.add_cache(result.cache)
        if result.notes:
            say(result.notes)
        self.record(group, pass_, len(result.indices), result.node_seconds, result.skipped, result.failure,
                    result.worker)
        return result

    def record(
        self,
        group: str,
        pass_: int,
        delivered: int,
        node_seconds: dict[str, float],
        skipped: Sequence[Failure],
        failure: Failure | None,
        worker: str,
    ) -> None:
        """Records samples computed together (a chunk or a batch); raises a failure."""
        skips = [Skip(f.index, f.item, f.node, f.detail, group, pass_) for f in skipped]
        if skips:
            self._skips.setdefault(group, set()).update(s.index for s in skips)
            for s in skips:
                if (s.group, s.index) not in self._logged:
                    self._logged.add((s.group, s.index))
                    _log.warning("group '%s', pass %d: skipped %s (worker %s)", group, pass_, s, worker)
        self.report.add(group, delivered, node_seconds, skips)
        if self.on_samples is not None:
            self.on_samples(delivered + len(skips))
        if failure is not None:
            raise failure_error(failure, group, pass_, worker)


def failure_error(f: Failure, group: str, pass_: int, worker: str) -> NodeError:
    """The error a failure raises, with the user's exception as its cause."""
    cause = f.error if f.error is not None else RuntimeError(f.detail)
    err: NodeError
    if f.reduction:
        err = NodeError(f.node, f.location, f"{f.detail} (while folding {f.item})")
    else:
        err = SampleError(f.node, f.location, f.detail, index=f.index, item=f.item, group=group,
                          pass_=pass_, worker=worker, reproduce=f.reproduce)
        if worker != "main" and f.traceback_text:
            cause.add_note(f"traceback in worker {worker}:\n{f.traceback_text.rstrip()}")
    err.__cause__ = cause
    return err
