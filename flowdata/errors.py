"""The exception tree of flowdata.

::

    FlowdataError                 every error flowdata raises on purpose
    ├── GraphError                the graph is wrong; holds every GraphProblem at once
    ├── InputError                a call asked for something the graph cannot give, or an
    │                             argument has a value it cannot take
    ├── MediaError                a file could not be decoded (names the path and why)
    ├── NodeError                 a once or Collect node raised; the user's error is chained
    │   └── SampleError           a per-sample node raised for one sample
    ├── PeerStopped               a rank stops because another told it that it failed
    │                             (inside a shared pass; the cause of the RankError it raises)
    ├── RankError                 another rank of torch.distributed failed in a shared pass
    ├── StatsError (ValueError)   a reducer received data it cannot fold
    ├── TooManySkipped            more samples skipped than ``max_skipped`` allows
    └── WorkerDied                a worker process died while it ran work (an executor's
                                  worker, or a DataLoader worker)

    UnreadInputWarning (UserWarning)    an ``inputs=`` key that no node reads
    InputLikeNodeWarning (UserWarning)  a parameter spelt almost like a node

Every message names the node, the function's ``file:line``, what was expected and what
came, and a fix. The user's own exception is kept as ``__cause__`` with flowdata's frames
removed from its traceback, so the first frame the reader sees is their own code.
"""

from __future__ import annotations

import os
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FlowdataError",
    "MediaError",
    "GraphError",
    "GraphProblem",
    "InputError",
    "InputLikeNodeWarning",
    "NodeError",
    "PeerStopped",
    "RankError",
    "SampleError",
    "StatsError",
    "TooManySkipped",
    "UnreadInputWarning",
    "WorkerDied",
    "check_rank",
    "expect_int",
    "short_repr",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class FlowdataError(Exception):
    """Base of every error flowdata raises on purpose."""


@dataclass(frozen=True)
class GraphProblem:
    """One thing wrong with a graph, found at build time.

    Attributes:
        code: Stable identifier (``FD101`` ...), documented in ``docs/errors.md``.
        title: Short name of the rule, e.g. ``type-mismatch``.
        message: What is wrong, naming the node(s).
        locations: ``file:line`` of every function involved, consumer first.
        expected: What the rule wanted (a type or a shape of graph), or ``""``.
        actual: What the graph has instead, or ``""``.
        fix: One line that says how to fix it.
        node: The node the problem is reported on.
    """

    code: str
    title: str
    message: str
    node: str
    locations: tuple[str, ...] = ()
    expected: str = ""
    actual: str = ""
    fix: str = ""

    def __str__(self) -> str:
        lines = [f"{self.code} {self.title}: {self.message}"]
        lines += [f"    at {loc}" for loc in self.locations]
        if self.expected or self.actual:
            lines.append(f"    expected: {self.expected}")
            lines.append(f"    actual:   {self.actual}")
        if self.fix:
            lines.append(f"    fix: {self.fix}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``flowdata check --format json``."""
        return {
            "code": self.code,
            "title": self.title,
            "message": self.message,
            "node": self.node,
            "locations": list(self.locations),
            "expected": self.expected,
            "actual": self.actual,
            "fix": self.fix,
        }


class GraphError(FlowdataError):
    """The graph has one or more problems; ``problems`` holds all of them."""

    def __init__(self, problems: Sequence[GraphProblem]):
        self.problems: tuple[GraphProblem, ...] = tuple(problems)
        n = len(self.problems)
        head = f"{n} problem{'s' if n != 1 else ''} in the graph:"
        super().__init__("\n".join([head, *(str(p) for p in self.problems)]))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))

    @property
    def codes(self) -> list[str]:
        """The codes of the problems, in report order."""
        return [p.code for p in self.problems]


class InputError(FlowdataError):
    """A call asked for an unknown output, lacked an input, or asked for the wrong kind of node;
    or one of its arguments has a value it cannot take (``batch_size=0``, ``on_error="ignore"``,
    ``executor="threads"``), refused before anything runs."""


class MediaError(FlowdataError):
    """A media file is missing, empty, truncated, of an unknown format or unsupported layout."""

    def __init__(self, path: str, problem: str, fix: str = ""):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" + (f"\n  fix: {fix}" if fix else ""))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_media_error, (self.path, self.problem, str(self)))


def _rebuild_media_error(path: str, problem: str, text: str) -> MediaError:
    err = MediaError(path, problem)
    err.args = (text,)
    return err


class NodeError(FlowdataError):
    """A once node or a Collect node raised; the user's exception is ``__cause__``."""

    def __init__(self, node: str, location: str, detail: str):
        self.node = node
        self.location = location
        self.detail = detail
        super().__init__(f"node '{node}' ({location}) failed: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.node, self.location, self.detail))


class SampleError(NodeError):
    """A per-sample node raised for one sample.

    Attributes:
        node: The node that raised.
        location: Its function's ``file:line``.
        index: The sample index within its group.
        item: A short repr of the source item of that sample.
        group: The group (named after its source).
        pass_: The pass (1 or 2, ...) the sample was in.
        worker: ``"main"`` or the worker process that ran it.
        detail: ``Type: message`` of the user's exception.
        reproduce: The per-sample node whose value to look at (the node itself, or the
            column a reduction could not fold).
    """

    def __init__(
        self,
        node: str,
        location: str,
        detail: str,
        *,
        index: int,
        item: str,
        group: str,
        pass_: int,
        worker: str,
        reproduce: str | None = None,
    ):
        self.index = index
        self.item = item
        self.group = group
        self.pass_ = pass_
        self.worker = worker
        self.reproduce = reproduce or node
        see = "reproduce it alone" if self.reproduce == node else f"see the value of '{self.reproduce}' it was given"
        FlowdataError.__init__(
            self,
            f"node '{node}' ({location}) failed on sample {index} of group '{group}' "
            f"(pass {pass_}, worker {worker}): {detail}\n"
            f"    item: {item}\n"
            f"    fix: {see} with driver.run_sample(['{self.reproduce}'], index={index}, "
            "inputs=<the same inputs>)",
        )
        self.node = node
        self.location = location
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_sample_error, (self.node, self.location, self.detail, self._fields()))

    def _fields(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "item": self.item,
            "group": self.group,
            "pass_": self.pass_,
            "worker": self.worker,
            "reproduce": self.reproduce,
        }


def _rebuild_sample_error(node: str, location: str, detail: str, fields: dict[str, Any]) -> SampleError:
    return SampleError(node, location, detail, **fields)


class RankError(FlowdataError):
    """Another rank failed in a pass the ranks share; every rank raises it, none is left waiting.

    Attributes:
        rank: The rank that failed first (lowest number among those that failed); -1 when
            an exchange between the ranks broke without saying which rank was lost.
        detail: Its error, as it reported it.
        fix: The fix, when not to look at that rank's own error (None).
    """

    def __init__(self, rank: int, world_size: int, where: str, detail: str, fix: str | None = None):
        self.rank = rank
        self.world_size = world_size
        self.where = where
        self.detail = detail
        self.fix = fix
        who = f"rank {rank}" if rank >= 0 else "a rank"  # -1: the connection broke, no rank known
        super().__init__(
            f"{who} of {world_size} failed in {where}, which the ranks share: {detail}\n"
            "  fix: " + (fix or f"see {who}'s own error (its log) and correct that; the other ranks stopped "
                         "with it")
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rank, self.world_size, self.where, self.detail, self.fix))


class PeerStopped(FlowdataError):
    """Raised on a rank that stops because another rank told it that it failed.

    It ends that rank's part of a shared pass; the rank then raises a :class:`RankError`
    naming the rank that failed, with this error as its cause.
    """

    def __init__(self, rank: int, detail: str):
        super().__init__(f"rank {rank} failed: {detail}")
        self.rank = rank
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rank, self.detail))


class StatsError(FlowdataError, ValueError):
    """A reducer received data it cannot fold (wrong shape, NaN under ``nan="raise"``)."""


class TooManySkipped(FlowdataError):
    """More samples were skipped than ``max_skipped`` allows."""


class WorkerDied(FlowdataError):
    """A worker process ended while it ran work (killed, out of memory, a native crash).

    The same class on every path: a process pool's or Ray's worker under ``execute()`` and a
    loader's statistics pass, and a DataLoader worker while a loader is iterated.
    """


class UnreadInputWarning(UserWarning):
    """An ``inputs=`` key that no node reads (often a typo: the default was used instead)."""


class InputLikeNodeWarning(UserWarning):
    """A parameter spelt almost like a node, which makes it an input (often a typo)."""


def expect_int(name: str, value: object, *, least: int, meaning: str) -> int:
    """``value`` when it is an int (not a bool) of at least ``least``, else an :class:`InputError`
    that names the argument, what came and what was expected (``meaning`` says what it counts)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return value
    wanted = "a positive int" if least == 1 else f"an int >= {least}"
    raise InputError(f"{name}={value!r}: expected {wanted} ({meaning})")


def check_rank(rank: object, world_size: object) -> tuple[int, int]:
    """``(rank, world_size)`` when ``world_size`` is a positive int and ``rank`` one of
    ``0 .. world_size - 1``, else an :class:`InputError`."""
    size = expect_int("world_size", world_size, least=1, meaning="the number of ranks")
    number = expect_int("rank", rank, least=0, meaning="this process's rank among the world_size ranks")
    if number >= size:
        raise InputError(f"rank={number!r}: expected an int from 0 to {size - 1} (this process's rank among "
                         f"world_size={size} ranks)")
    return number, size


def short_repr(value: Any, limit: int = 120) -> str:
    """A repr cut to ``limit`` characters, safe on objects whose repr raises."""
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__} (repr failed: {exc!r})>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line; a ``fix:`` line of the message
    (flowdata's own errors, such as ``MediaError``, carry one) is kept after a dash."""
    msg = str(exc).strip().splitlines()
    if not msg:
        return type(exc).__name__
    fixes = [line.strip()[4:].strip() for line in msg[1:] if line.strip().startswith("fix:")]
    return f"{type(exc).__name__}: {msg[0]}" + (f" -- fix: {fixes[0]}" if fixes else "")


def user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drops the leading frames that belong to flowdata or Hamilton's wrappers.

    The traceback of an exception caught by flowdata starts at flowdata's own call site;
    the reader wants to start at their function.
    """
    skip = (_PACKAGE_DIR, os.path.join("site-packages", "hamilton"))
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename.startswith((skip[0], "<flowdata")):
        first = first.tb_next
    rest = first
    while rest is not None and skip[1] in rest.tb_frame.f_code.co_filename:
        rest = rest.tb_next
    return rest if rest is not None else first if first is not None else tb

