"""The per-sample path of a ``Sequential`` group: one sample at a time, at a loop's speed.

A ``Sequential`` group's samples are processed strictly one after the other, in order:
sample ``i + 1`` is not pulled from the source before every consumer has taken sample
``i`` (a stream may depend on what a consumer did with the previous sample). Chunks of
one sample through the general kernel cost several microseconds each, so this module
compiles the pass into one small Python function per call -- the nodes called one after
the other, each on its own line, with whole values bound as constants -- and hands each
sample to the consumers as a light one-sample chunk. Counts and node times are added to
the report in batches (and when the stream stops, early or not).

A node that raises is found from the line of the compiled function it raised on, so a
failure names the node exactly as the kernel would, and the sample is skipped or the
error raised under the same ``on_error`` policy.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from flowdata.columns import as_form
from flowdata.node import Node
from flowdata.run.deadline import SampleTimeout, guarded_calls
from flowdata.run.caching.samplecache import flush_queued
from flowdata.run.caching.store import take_notes
from flowdata.run.kernel import (ChunkResult, Failure, PassSpec, failure_of, non_finite, return_type_error, run_chunk,
                                 vector_values)
from flowdata.sample import make_rng
from flowdata.typecheck import contradicts

__all__ = ["OneSample", "SequentialStream", "compile_pass"]

_FLUSH = 256
_TIMED = 16


class OneSample:
    """One sample as a chunk: what consumers read (``columns``, ``pieces``, ``span``)."""

    __slots__ = ("columns", "indices", "items", "pieces", "span")

    def __init__(self, index: int, columns: dict[str, list[Any]], pieces: dict[str, list[Any]], item: Any = None):
        self.items = (item,)
        self.columns = columns
        self.pieces = pieces
        self.span = (index, index + 1)
        self.indices = (index,)


def compile_pass(
    nodes: Mapping[str, Node], spec: PassSpec, whole: Mapping[str, Any], timed: bool, single: str | None = None,
    bounded: Callable[..., Callable[..., Any]] | None = None, checked: bool = False,
) -> tuple[Any, list[str]]:
    """A function ``(item, index, seconds) -> columns`` computing the pass for one sample.

    With ``timed``, it adds each node's time to ``seconds``; with ``single``, it returns
    that column's value itself instead of the columns; with ``checked``, it checks each
    value against its node's annotation (the first sample's); with ``bounded`` (see
    :func:`~flowdata.run.deadline.guarded_calls`), each node call under ``timeout=``. Returns the function and the
    node computed on each line of its body (line 2 is the first node), for naming the
    node that raised.
    """
    env: dict[str, Any] = {"_pc": time.perf_counter, "_rng": make_rng, "_seed": spec.seed, "_epoch": spec.epoch,
                           "_as_form": as_form}
    local = {spec.group: "item", "sample_index": "index"}
    lines: list[str] = []
    by_line: list[str] = []
    if any(p.name == "sample_rng" and p.name not in whole for n in spec.computes for p in nodes[n].params):
        # One generator per sample, shared by its nodes in order (as in the kernel).
        lines.append("    rng = _rng(_seed, _epoch, index)")
        by_line.append(spec.computes[0])
    for k, name in enumerate(spec.computes):
        node = nodes[name]
        env[f"f{k}"] = node.fn if bounded is None else bounded(node.fn, k, None)
        args: list[str] = []
        for j, p in enumerate(node.params):
            if p.name in local:
                ref = local[p.name]
            elif p.name in whole:
                ref = f"w{k}_{j}"
                env[ref] = whole[p.name]
            elif p.name == "sample_rng":
                ref = "rng"
            else:
                ref = f"d{k}_{j}"
                env[ref] = p.default
            if node.vectorized and ref in ("rng", *local.values()):
                # a list of this one sample's value, or a column of one (flowdata.columns)
                ref = f"_as_form([{ref}], {p.form!r})" if p.form else f"[{ref}]"
            args.append(ref if node.positional_call else f"{p.name}={ref}")
        if node.vectorized:
            env[f"f{k}"] = _first_of(node, env[f"f{k}"])
        call = f"v{k} = f{k}({', '.join(args)})"
        lines.append(f"    t = _pc(); {call}; seconds[{k}] += _pc() - t" if timed else f"    {call}")
        by_line.append(name)
        if checked:
            env[f"c{k}"] = functools.partial(_check, node)
            lines.append(f"    c{k}(v{k})")
            by_line.append(name)
        local[name] = f"v{k}"
    wanted = list(dict.fromkeys([*spec.want, *(f.column for f in spec.folds)]))
    body = ", ".join(f"{w!r}: [{local[w]}]" for w in wanted)
    source = "def one(item, index, seconds):\n" + "".join(line + "\n" for line in lines)
    source += f"    return {local[single]}\n" if single is not None else f"    return {{{body}}}\n"
    code = compile(source, f"<flowdata pass {spec.number} of group {spec.group!r}{' timed' if timed else ''}>", "exec")
    exec(code, env)
    return env["one"], by_line


def _check(node: Node, value: Any) -> None:
    if contradicts(value, node.type):
        raise return_type_error(node, value)


def _first_of(node: Node, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A ``@vectorized`` node's function called on one sample: its one value."""

    def one(*args: Any, **kwargs: Any) -> Any:
        return vector_values(node, fn(*args, **kwargs), 1)[0]

    return one


class SequentialStream:
    """The one-sample chunks of a pass, in order (an iterator), or one column's values.

    Args:
        nodes: The nodes.
        spec: The pass.
        whole: Whole values it reads.
        items: The source's items (closed with the stream).
        exclude: Samples skipped in an earlier pass.
        report: Called as ``report(delivered, node_seconds)`` every few hundred samples
            and at the end, with what was computed since the last call. Node times are
            measured on every :data:`_TIMED`-th sample (a clock read costs as much as a
            trivial node) and scaled to all samples.
        failed: Called with the :class:`Failure` of a sample whose node raised; it
            raises, or returns to skip the sample.
        checked: With ``cache=`` (``spec.cache``): each sample is a one-sample chunk of the
            kernel (:func:`~flowdata.run.kernel.run_chunk`, which reads and writes the sample
            cache), handed to ``checked`` -- the recorder -- which records it or raises its
            failure. The cached nodes' values are written a few hundred samples at a time.
        skip: Whether the kernel leaves a failing sample out (``on_error="skip"``).
    """

    def __init__(
        self,
        nodes: Mapping[str, Node],
        spec: PassSpec,
        whole: Mapping[str, Any],
        items: Iterator[Any],
        exclude: frozenset[int],
        report: Callable[[int, list[float]], None],
        failed: Callable[[Failure], None],
        checked: Callable[[ChunkResult], None] | None = None,
        skip: bool = False,
    ):
        self._args = (nodes, spec, whole)
        self._items, self._exclude, self._report, self._failed = items, exclude, report, failed
        self._checked, self._skip = checked, skip
        self._running: Generator[Any, None, None] | None = None

    def __iter__(self) -> Iterator[OneSample]:
        return self

    def __next__(self) -> OneSample:
        if self._running is None:
            self._running = self._run(None)
        return next(self._running)  # type: ignore[no-any-return]

    def values(self, column: str) -> Iterator[Any]:
        """Only ``column``'s values, for a stream read by one consumer (the fastest path)."""
        nodes, spec, _ = self._args
        if self._running is not None or spec.folds or column not in spec.want:
            return (v for one in self for v in one.columns[column])
        self._running = self._run(column)
        return self._running

    def close(self) -> None:
        """Stops the stream and closes the source's items."""
        if self._running is not None:
            self._running.close()
        else:
            _close(self._items)

    def _run(self, single: str | None) -> Generator[Any, None, None]:
        spec = self._args[1]
        if spec.cache:
            yield from self._through_kernel(single)
            return
        with guarded_calls(spec.timeout, None) as bounded:  # in this process: the interrupt layer only
            yield from self._samples(single, bounded)

    def _through_kernel(self, single: str | None) -> Generator[Any, None, None]:
        """The samples as one-sample chunks of the kernel (``cache=``: see ``checked``)."""
        nodes, spec, whole = self._args
        items, exclude, checked = self._items, self._exclude, self._checked
        assert checked is not None, "a Sequential pass with cache= is recorded by its engine"
        queued = 0
        try:
            for i, item in enumerate(items):
                if exclude and i in exclude:
                    continue
                result = run_chunk(nodes, spec, whole, (i,), (item,), skip=self._skip, span=(i, i + 1), flush=False)
                queued += 1
                if queued == _FLUSH:
                    queued = 0
                    result.cache = _added(result.cache, flush_queued(spec.cache))
                checked(result)  # raises a failure under "raise"; records a skip under "skip"
                if not result.indices:
                    continue
                if single is not None:
                    yield result.columns[single][0]
                else:
                    yield OneSample(i, result.columns, result.pieces, item)
        finally:
            last = ChunkResult((), {}, cache=flush_queued(spec.cache))
            if last.cache:
                last.notes = take_notes()
                checked(last)
            _close(items)

    def _samples(
        self, single: str | None, bounded: Callable[..., Callable[..., Any]] | None
    ) -> Generator[Any, None, None]:
        nodes, spec, whole = self._args
        items, exclude, report, failed = self._items, self._exclude, self._report, self._failed
        fast, by_line = compile_pass(nodes, spec, whole, timed=False, single=single, bounded=bounded)
        timed, _ = compile_pass(nodes, spec, whole, timed=True, single=single, bounded=bounded)
        # The first sample computed whole is checked against the annotations (then no more).
        checking: Any = compile_pass(nodes, spec, whole, timed=True, single=single, bounded=bounded, checked=True)
        seconds = [0.0] * len(spec.computes)
        folds = [(f.node, f.column) for f in spec.folds]
        drop = [f.column for f in spec.folds if f.column not in spec.want]
        no_pieces: dict[str, list[Any]] = {}
        delivered = measured = countdown = 0  # countdown: samples until the next timed one
        try:
            for i, item in enumerate(items):
                if exclude and i in exclude:
                    continue
                try:
                    if countdown and checking is None:
                        countdown -= 1
                        out = fast(item, i, seconds)
                    else:
                        countdown = _TIMED - 1
                        measured += 1
                        out = timed(item, i, seconds) if checking is None else checking[0](item, i, seconds)
                        checking = None
                except (Exception, SystemExit, SampleTimeout) as exc:  # sys.exit() in a node is its failure
                    failed(failure_of(_failed_node(exc, by_line if checking is None else checking[1], nodes),
                                      i, item, exc))
                    continue
                delivered += 1  # before the hand-over: a consumer may stop the stream there
                if single is not None:
                    yield out
                elif folds:
                    bad = non_finite(nodes, spec, out, (i,), (item,))
                    if bad is not None:  # a value a reduction would fold is NaN or inf
                        delivered -= 1
                        failed(bad)
                        continue
                    pieces = {node: [("value", i, out[column][0])] for node, column in folds}
                    for column in drop:
                        del out[column]
                    yield OneSample(i, out, pieces, item)
                else:
                    yield OneSample(i, out, no_pieces)
                if delivered == _FLUSH:
                    report(delivered, [x * delivered / max(measured, 1) for x in seconds])
                    delivered, measured, seconds[:] = 0, 0, [0.0] * len(seconds)
        finally:
            if delivered:
                report(delivered, [x * delivered / max(measured, 1) for x in seconds])
            _close(items)


def _close(items: Iterator[Any]) -> None:
    close = getattr(items, "close", None)
    if close is not None:
        close()


def _failed_node(exc: BaseException, by_line: Sequence[str], nodes: Mapping[str, Node]) -> Node:
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<flowdata pass"):
        tb = tb.tb_next
    line = tb.tb_lineno if tb is not None else 2
    return nodes[by_line[min(max(line - 2, 0), len(by_line) - 1)]]


def _added(counts: dict[str, list[int]], delta: dict[str, list[int]]) -> dict[str, list[int]]:
    """Sample-cache counts with a correction added (values a folder could not take)."""
    out = {k: list(v) for k, v in counts.items()}
    for name, d in delta.items():
        mine = out.setdefault(name, [0] * len(d))
        mine[:] = [a + b for a, b in zip(mine, d, strict=True)]
    return out
