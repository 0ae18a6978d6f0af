"""The consumers of a pass: plain Collect functions and reductions, sharing one stream.

A plain Collect node is an ordinary function that iterates its ``Collect[...]``
parameters. Several consumers of one pass each run in their own thread (the first in the
calling thread), reading one shared stream of chunks (:class:`Tee`). Each reader has a
small bounded buffer: whoever needs the next chunk computes it, unless a slower reader's
buffer is full, in which case it waits. Memory therefore stays bounded by a few chunks,
whatever the number of samples. A reader whose function returns is closed; when every
reader is closed the source is closed and pending work is dropped, so a Collect function
that stops early stops the upstream work. Several ``Collect`` parameters of one node are
served in lockstep from the same chunks.

What a parameter receives (decided when the graph is built, :mod:`flowdata.usage`): a lazy, once-only stream when
the function consumes it once on the spot, else a ``list`` of every value -- so returning,
storing, concatenating or re-reading a Collect argument works as in Hamilton.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from flowdata.errors import FlowdataError, NodeError, describe, user_traceback
from flowdata.node import Node
from flowdata.run.folding import BlockError, Folder
from flowdata.run.kernel import ChunkResult, return_type_error
from flowdata.typecheck import contradicts

__all__ = ["JobThread", "Tee", "call_collect", "collect_arguments", "reduce_all", "run_jobs"]

_BUFFER_CHUNKS = 4


class Tee:
    """One stream of chunks read by several readers, each in its own thread.

    The reader that needs a chunk nobody has computed yet pulls it from the source itself
    (outside the lock), unless another reader's buffer is full. See the module docstring.
    """

    def __init__(self, source: Iterator[ChunkResult], readers: int, capacity: int = _BUFFER_CHUNKS):
        self._source = source
        self.alone = readers == 1
        self._cond = threading.Condition()
        self._buffers: list[deque[ChunkResult]] = [deque() for _ in range(readers)]
        self._alive = [True] * readers
        self._capacity = capacity
        self._pulling = False
        self._done = False
        self._error: BaseException | None = None

    def next(self, r: int) -> ChunkResult | None:
        """The next chunk for reader ``r``, or None at the end of the stream."""
        if len(self._buffers) == 1:
            return self._next_alone()
        while True:
            with self._cond:
                while True:
                    buf = self._buffers[r]
                    if buf:
                        ready = buf.popleft()
                        self._cond.notify_all()
                        return ready
                    if self._done:
                        if self._error is not None:
                            raise self._error
                        return None
                    if not self._pulling and all(
                        len(b) < self._capacity
                        for i, b in enumerate(self._buffers)
                        if i != r and self._alive[i]
                    ):
                        self._pulling = True
                        break
                    self._cond.wait(0.5)  # in slices: a Ctrl-C is noticed (see executors._wait)
            chunk: ChunkResult | None = None
            error: BaseException | None = None
            try:
                chunk = next(self._source)
            except StopIteration:
                pass
            except BaseException as exc:  # handed to every reader
                error = exc
            with self._cond:
                self._pulling = False
                if chunk is None:
                    self._done = True
                    self._error = error
                else:
                    for i, alive in enumerate(self._alive):
                        if alive:
                            self._buffers[i].append(chunk)
                self._cond.notify_all()
                if not any(self._alive):
                    self._close_source()

    @property
    def source(self) -> Iterator[ChunkResult]:
        """The stream itself, for a reader that is the only one."""
        return self._source

    def _next_alone(self) -> ChunkResult | None:
        # One reader: no other thread, so no lock and no notification per chunk.
        if self._done:
            return None
        try:
            return next(self._source)
        except StopIteration:
            self._done = True
            return None

    def close(self, r: int) -> None:
        """Reader ``r`` reads no more; the last one to leave stops the source."""
        with self._cond:
            self._alive[r] = False
            self._buffers[r].clear()
            self._cond.notify_all()
            if not any(self._alive) and not self._pulling:
                self._close_source()

    def _close_source(self) -> None:
        if not self._done:
            self._done = True
            close = getattr(self._source, "close", None)
            if close is not None:
                close()


class _Once:
    """A Collect parameter's lazy stream: iterable once (a second read is an error)."""

    __slots__ = ("_it", "_node", "_param")

    def __init__(self, it: Iterator[Any], node: Node, param: str):
        self._it: Iterator[Any] | None = it
        self._node, self._param = node, param

    def __iter__(self) -> Iterator[Any]:
        it, self._it = self._it, None
        if it is None:
            raise FlowdataError(
                f"Collect parameter '{self._param}' of '{self._node.name}' ({self._node.location}) "
                "was read a second time; it streams its values once\n"
                f"  fix: read it into a list first ('{self._param} = list({self._param})')"
            )
        return it


class _Upstream(Exception):
    """Marks an error raised by the pass feeding a Collect function, not by the function."""


def _column(tee: Tee, r: int, column: str) -> Iterator[Any]:
    try:
        if tee.alone:  # the only reader: straight from the source, no hand-over per chunk
            values = getattr(tee.source, "values", None)  # a Sequential stream's fast path
            if values is not None:
                yield from values(column)
                return
            for one in tee.source:
                yield from one.columns[column]
            return
        while (chunk := tee.next(r)) is not None:
            yield from chunk.columns[column]
    except Exception as exc:
        _mark_upstream(exc)
        raise


def _mark_upstream(exc: BaseException) -> None:
    # The Collect function sees the error come out of its loop; call_collect must not make
    # it the function's own error.
    try:
        exc.__flowdata_upstream__ = True  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with slots: it is reported as it is
        pass


class _Lockstep:
    """Several Collect parameters of one node, served from the same chunks."""

    def __init__(self, tee: Tee, r: int, columns: Sequence[str]):
        self._tee, self._r = tee, r
        self._buffers: dict[str, deque[Any]] = {c: deque() for c in columns}

    def _fill(self) -> bool:
        try:
            chunk = self._tee.next(self._r)
        except Exception as exc:
            _mark_upstream(exc)
            raise
        if chunk is None:
            return False
        for c, buf in self._buffers.items():
            buf.extend(chunk.columns[c])
        return True

    def column(self, column: str) -> Iterator[Any]:
        buf = self._buffers[column]
        while True:
            while buf:
                yield buf.popleft()
            if not self._fill():
                return


def collect_arguments(node: Node, tee: Tee, r: int) -> dict[str, Any]:
    """The values of ``node``'s Collect parameters, read from reader ``r`` of ``tee``."""
    params = node.collect_params
    if len(params) == 1:
        streams = {params[0].name: _column(tee, r, params[0].name)}
    else:
        lock = _Lockstep(tee, r, [p.name for p in params])
        streams = {p.name: lock.column(p.name) for p in params}
    out: dict[str, Any] = {}
    for p in params:
        if not p.as_list:  # decided when the graph was built (flowdata.usage)
            out[p.name] = _Once(streams[p.name], node, p.name)
        else:
            out[p.name] = list(streams[p.name])
    return out


def call_collect(node: Node, args: Mapping[str, Any], tee: Tee, r: int) -> Any:
    """Calls a plain Collect node on reader ``r``; its error becomes a ``NodeError``."""
    try:
        value = node.fn(**args, **collect_arguments(node, tee, r))
        if contradicts(value, node.type):  # named here, not at the consumer it would break
            raise NodeError(node.name, node.location, describe(return_type_error(node, value)))
        return value
    except FlowdataError:
        raise
    except Exception as exc:
        if getattr(exc, "__flowdata_upstream__", False):
            raise  # the pass failed, not this function

        raise NodeError(node.name, node.location, describe(exc)) from exc.with_traceback(
            user_traceback(exc.__traceback__)
        )
    finally:
        tee.close(r)


BadValue = Callable[[Any, int, Any, BaseException], None]
"""``bad(fold_spec, index, item, error)``: a loose value a reduction could not fold here."""


def reduce_all(folders: list[Folder], tee: Tee, r: int, bad: BadValue | None = None) -> dict[str, Any]:
    """Reads every chunk of the pass (reductions never stop early) into the folders.

    A loose value a reducer cannot fold is handed to ``bad`` with its sample's item (kept
    here until the value's block is folded), which raises or lets the pass go on without
    it.
    """
    folder = folders[0]
    items: dict[int, Any] = {}  # the items of loose values whose block is still open
    if bad is not None:
        for f in folders:
            f.on_bad = functools.partial(_bad_value, bad, f.spec, items)
    try:
        while (chunk := tee.next(r)) is not None:
            if bad is not None:
                loose = {at for f in folders for kind, at, _ in chunk.pieces.get(f.spec.node, ()) if kind != "block"}
                if loose:  # where their items are: read only for a value that cannot be folded
                    items.update((i, (chunk.items, p)) for p, i in enumerate(chunk.indices) if i in loose)
            for folder in folders:
                folder.add(chunk.pieces.get(folder.spec.node, ()), chunk.span)
            if items:
                done_below = min(f.open_from for f in folders)
                for i in [i for i in items if i < done_below]:
                    del items[i]
        done = {}
        for folder in folders:
            done[folder.spec.node] = folder.finish()
        return done
    except BlockError as err:  # loose values folded here: the same error as in a worker
        cause = err.__cause__ if err.__cause__ is not None else err
        spec = folder.spec
        raise NodeError(spec.node, spec.location, f"{describe(cause)} (while folding {err.samples})") from (
            cause.with_traceback(user_traceback(cause.__traceback__)))
    finally:
        tee.close(r)


def _bad_value(bad: BadValue, spec: Any, items: dict[int, Any], index: int, error: BaseException) -> None:
    held = items.get(index)
    bad(spec, index, "?" if held is None else held[0][held[1]], error)


class JobThread(threading.Thread):
    """Runs one consumer of a shared stream on its reader; keeps its result or error."""

    def __init__(self, job: Callable[[Tee, int], Any], tee: Tee, r: int):
        super().__init__(name=f"flowdata-consumer-{r}", daemon=True)
        self.job, self.tee, self.r = job, tee, r
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.job(self.tee, self.r)
        except BaseException as exc:
            self.error = exc

    def reraise(self) -> None:
        if self.error is not None:
            raise self.error


def run_jobs(jobs: list[Callable[[Tee, int], Any]], tee: Tee) -> list[Any]:
    """Runs the first job in this thread and the others in their own threads."""
    threads = [JobThread(job, tee, i + 1) for i, job in enumerate(jobs[1:])]
    for t in threads:
        t.start()
    first_error: BaseException | None = None
    first: Any = None
    try:
        first = jobs[0](tee, 0)
    except BaseException as exc:
        first_error = exc
    for t in threads:
        while t.is_alive():
            t.join(0.5)  # in slices: a Ctrl-C is noticed (see executors._wait)
    if first_error is not None:
        raise first_error
    for t in threads:
        t.reraise()
    return [first, *(t.result for t in threads)]
