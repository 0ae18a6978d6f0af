"""Streams of chunks: cutting a source into chunks, and sharing one stream among consumers.

Chunk sizes
-----------
:class:`ChunkSizer` starts chunks small and doubles them while one takes less than about
20 ms, so tiny samples amortise the per-chunk cost and slow samples still spread over the
workers early; it also keeps a chunk under about 8 MB (estimated from the first sample of
each column), so large samples do not pile up in memory, and keeps chunks block-aligned
when reductions fold blocks where the samples are computed.

Fan-out
-------
A plain Collect node is an ordinary function that iterates its ``Collect[...]``
parameters. Several consumers of one pass each run in their own thread (the first in the
calling thread), reading one shared stream of chunks (:class:`Tee`). Each reader has a
small bounded buffer: whoever needs the next chunk computes it, unless a slower reader's
buffer is full, in which case it waits. Memory therefore stays bounded by a few chunks,
whatever the number of samples. A reader whose function returns is closed; when every
reader is closed the source is closed and pending work is dropped, so a Collect function
that stops early stops the upstream work. Several ``Collect`` parameters of one node are
served in lockstep from the same chunks.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any

from flowdata.chunk import ChunkResult
from flowdata.node import Node

__all__ = ["ChunkSizer", "JobThread", "MAX_CHUNK", "Tee", "approx_bytes", "chunked", "collect_iterables", "run_jobs"]

_MIN_CHUNK, MAX_CHUNK, _TARGET_SECONDS, _TARGET_BYTES = 8, 4096, 0.02, 8 << 20
_BUFFER_CHUNKS = 4


class Tee:
    """One stream of chunks read by several readers, each in its own thread.

    The reader that needs a chunk nobody has computed yet pulls it from the source itself
    (outside the lock), unless another reader's buffer is full. See the module docstring.
    """

    def __init__(self, source: Iterator[ChunkResult], readers: int, capacity: int = _BUFFER_CHUNKS):
        self._source = source
        self._cond = threading.Condition()
        self._buffers: list[deque[ChunkResult]] = [deque() for _ in range(readers)]
        self._alive = [True] * readers
        self._capacity = capacity
        self._pulling = False
        self._done = False
        self._error: BaseException | None = None

    def next(self, r: int) -> ChunkResult | None:
        """The next chunk for reader ``r``, or None at the end of the stream."""
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
                    self._cond.wait()
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


def _column(tee: Tee, r: int, column: str) -> Iterator[Any]:
    """One Collect parameter read from reader ``r``."""
    while (chunk := tee.next(r)) is not None:
        yield from chunk.columns[column]


class _Lockstep:
    """Several Collect parameters of one node, served from the same chunks."""

    def __init__(self, tee: Tee, r: int, columns: Sequence[str]):
        self._tee, self._r = tee, r
        self._buffers: dict[str, deque[Any]] = {c: deque() for c in columns}

    def _fill(self) -> bool:
        chunk = self._tee.next(self._r)
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


def collect_iterables(node: Node, tee: Tee, r: int) -> dict[str, Iterator[Any]]:
    params = node.collect_params
    if len(params) == 1:
        return {params[0].name: _column(tee, r, params[0].name)}
    lock = _Lockstep(tee, r, [p.name for p in params])
    return {p.name: lock.column(p.name) for p in params}


def chunked(
    items: Iterator[Any], size: Callable[[], int], exclude: frozenset[int] = frozenset()
) -> Iterator[tuple[tuple[int, int], list[int], list[Any]]]:
    """Cuts items into runs of consecutive sample indices: ``(span, indices, items)``.

    Samples whose index is in ``exclude`` (skipped in an earlier pass) are left out of
    ``indices`` and ``items`` but stay inside ``span``, so blocks keep their boundaries.
    """
    start = 0
    while True:
        chunk = list(islice(items, size()))
        if not chunk:
            return
        stop = start + len(chunk)
        if exclude:
            kept = [(i, x) for i, x in zip(range(start, stop), chunk, strict=True) if i not in exclude]
            yield (start, stop), [i for i, _ in kept], [x for _, x in kept]
        else:
            yield (start, stop), list(range(start, stop)), chunk
        start = stop


class ChunkSizer:
    """Chooses how many samples go in the next chunk.

    Chunks start small and double while one takes less than about 20 ms, so tiny samples
    amortise the per-chunk cost and slow samples still spread over the workers early; a
    chunk is also kept under about 8 MB (estimated from the first sample of each column),
    so large samples (decoded media, 1 MB blobs) do not pile up in memory.
    """

    def __init__(self, fixed: int | None, limit: int, align: int = 1):
        self.fixed = fixed
        self.limit = limit
        self.align = align
        self.size = fixed or max(_MIN_CHUNK, align)

    def next_size(self) -> int:
        return self.size

    def observe(self, result: ChunkResult, items: list[Any]) -> None:
        n = len(items)
        if self.fixed or n == 0:
            return
        per_sample = approx_bytes(items[0]) + sum(
            approx_bytes(col[0]) for col in result.columns.values() if len(col)
        )
        cap = max(1, _TARGET_BYTES // max(per_sample, 1))
        if result.seconds < _TARGET_SECONDS and n >= self.size:
            self.size = min(self.size * 2, self.limit)
        # Reductions fold whole blocks where the samples are: keep chunks block-aligned.
        self.size = max(self.align, min(self.size, cap) // self.align * self.align)


def approx_bytes(value: Any) -> int:
    """A cheap estimate of the memory a value holds (buffers of arrays and tensors included)."""
    if isinstance(value, (bytes, bytearray, str, memoryview)):
        return len(value)
    nbytes = getattr(value, "nbytes", None)  # numpy arrays, torch tensors (torch >= 2.1)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, (list, tuple)) and value:
        return 56 + len(value) * approx_bytes(value[0])
    if isinstance(value, dict) and value:
        k, v = next(iter(value.items()))
        return 232 + len(value) * (approx_bytes(k) + approx_bytes(v))
    return sys.getsizeof(value, 64)


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
        t.join()
    if first_error is not None:
        raise first_error
    for t in threads:
        t.reraise()
    return [first, *(t.result for t in threads)]
