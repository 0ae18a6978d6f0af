"""The kernel: per-sample work on one chunk of samples, column by column.

A chunk is a run of consecutive samples of one group. For each per-sample node, in
dependency order, the node's function is mapped over the chunk's columns at once (one
Python call per sample, no per-sample scheduling), so the cost per sample is close to a
plain loop. Whole values (once nodes, inputs, Collect results) are repeated along the
column. Reductions are folded here too (see :mod:`flowdata.run.folding`).

The kernel runs wherever samples are computed: in the main process, in executor workers
and in DataLoader workers. It never raises for a sample: a failure comes back as plain
data (:class:`Failure`) for the engine to turn into an error or a skip record. The first
value of each node in a chunk is checked against the node's return annotation (one
``isinstance``): a contradiction is a :class:`ReturnTypeError` failure named at that node,
``fatal`` (a fault of the node, raised under ``on_error="skip"`` too).
"""

from __future__ import annotations

import dataclasses
import math
import pickle
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from flowdata.columns import Column, Stacked, StackError, as_column, as_form, take
from flowdata.errors import describe, short_repr, user_traceback
from flowdata.node import Node
from flowdata.reduce import BLOCK, ReduceSpec
from flowdata.run.chunking import approx_bytes
from flowdata.run.deadline import SampleTimeout, guarded_calls
from flowdata.run.folding import BlockError, Piece, ValueFoldError, pieces_of
from flowdata.run.caching.samplecache import CachedNode, ChunkCache
from flowdata.sample import make_rng
from flowdata.typecheck import contradicts
from flowdata.types import type_name

__all__ = ["ChunkResult", "Failure", "FoldSpec", "PassSpec", "ReturnTypeError", "failure_of", "non_finite", "portable",
           "return_type_error", "run_chunk", "vector_values"]


@dataclass(frozen=True)
class FoldSpec:
    """A reduction fed by a pass: which column it folds and how to make its reducer.

    Attributes:
        node: The reduction node.
        column: The per-sample node (or source) whose values it folds.
        reducer: The ``@reduce`` declaration.
        options: Whole-valued parameters of the node, passed to the reducer's constructor.
        location: The node's ``file:line``, for messages.
    """

    node: str
    column: str
    reducer: ReduceSpec
    options: Mapping[str, Any]
    location: str = ""

    def fresh(self) -> Any:
        """A new, empty reducer."""
        return self.reducer.make(**self.options)


@dataclass(frozen=True)
class PassSpec:
    """What one pass computes for each sample; names only, so it pickles.

    Attributes:
        group: The group's source name.
        number: The pass number.
        computes: Per-sample nodes to compute, producers first.
        want: Columns to hand back (collected values and outputs).
        seed: Seed for ``sample_rng``.
        epoch: Epoch for ``sample_rng``.
        folds: Reductions folded where the samples are computed.
        timeout: Seconds one node may spend on one sample (``timeout=``), or None.
        watch: The watch folder worker processes record their calls in (with ``timeout``).
        cache: The cached nodes it computes (``cache=``, :mod:`~flowdata.run.caching.samplecache`).
    """

    group: str
    number: int
    computes: tuple[str, ...]
    want: tuple[str, ...]
    seed: int = 0
    epoch: int = 0
    folds: tuple[FoldSpec, ...] = ()
    timeout: float | None = None
    watch: str | None = None
    cache: tuple[CachedNode, ...] = ()


@dataclass(frozen=True)
class Failure:
    """A node that raised for one sample, as plain data that crosses processes."""

    node: str
    location: str
    index: int
    item: str
    detail: str
    error: BaseException | None
    traceback_text: str
    reduction: bool = False
    reproduce: str = ""  # the node whose value to look at, when not ``node`` (see SampleError)
    fatal: bool = False  # a fault of the node, not of the sample: raised under on_error="skip" too


@dataclass
class ChunkResult:
    """The wanted columns of a chunk, or the failure that stopped it.

    ``indices`` are the samples delivered (skipped ones left out); ``span`` is the range of
    sample indices the chunk covered. ``pieces`` holds, per reduction, what the chunk
    folded and the loose values it did not (:data:`flowdata.run.folding.Piece`).
    ``skipped`` lists the samples left out under ``on_error="skip"``; ``node_seconds`` the
    time spent in each node; ``sample_bytes`` an estimate of one sample's memory (its item
    and every computed value), for chunk sizing. ``items`` are the delivered samples' items,
    set in the main process (they travel back from a worker only for a task that read a
    shard there, :func:`~flowdata.run.executors.worker.run_shard`). ``notes`` are the sample cache's
    warnings (a damaged segment, a folder that cannot be written), said once where the run
    is driven (:func:`flowdata.run.caching.passcache.say`).
    """

    indices: Sequence[int]
    columns: dict[str, list[Any]]
    failure: Failure | None = None
    seconds: float = 0.0
    worker: str = "main"
    pieces: dict[str, list[Piece]] = field(default_factory=dict)
    span: tuple[int, int] = (0, 0)
    skipped: list[Failure] = field(default_factory=list)
    node_seconds: dict[str, float] = field(default_factory=dict)
    sample_bytes: int = 0
    items: Sequence[Any] = ()
    cache: dict[str, list[int]] = field(default_factory=dict)
    notes: list[tuple[str, str, str]] = field(default_factory=list)

    def absorb(self, part: ChunkResult) -> None:
        """Adds the next chunk of the same run of samples (a shard read where it runs):
        timings, skips, the sample cache's counts and notes; its columns, folded pieces and
        delivered samples unless it failed (then its failure is this result's)."""
        self.skipped.extend(part.skipped)
        self.seconds += part.seconds
        self.worker = part.worker
        self.sample_bytes = max(self.sample_bytes, part.sample_bytes)
        for name, t in part.node_seconds.items():
            self.node_seconds[name] = self.node_seconds.get(name, 0.0) + t
        for name, counts in part.cache.items():
            summed = self.cache.setdefault(name, [0] * len(counts))
            summed[:] = [a + b for a, b in zip(summed, counts, strict=True)]
        self.notes.extend(part.notes)
        if part.failure is not None:
            self.failure = part.failure
            return
        if not isinstance(self.indices, list):
            self.indices = list(self.indices)
        self.indices.extend(part.indices)
        for name, values in part.columns.items():
            self.columns.setdefault(name, []).extend(values)
        for name, pieces in part.pieces.items():
            self.pieces.setdefault(name, []).extend(pieces)


def _call_kw(fn: Callable[..., Any], names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    return fn(**dict(zip(names, values, strict=True)))


def run_chunk(
    nodes: Mapping[str, Node],
    spec: PassSpec,
    whole: Mapping[str, Any],
    indices: Sequence[int],
    items: Sequence[Any],
    worker: str = "main",
    skip: bool = False,
    span: tuple[int, int] | None = None,
    flush: bool = True,
) -> ChunkResult:
    """Computes ``spec.computes`` for every sample of the chunk.

    Args:
        nodes: Nodes by name.
        spec: The pass.
        whole: Whole values the pass reads (once nodes, inputs, Collect results).
        indices: Sample indices of the chunk, ascending.
        items: Source items, aligned with ``indices``.
        worker: Name of the process, for error messages.
        skip: Leave out a sample whose node raises (recorded in ``skipped``) instead of
            stopping at it.
        span: The range of sample indices the chunk covers (default: ``indices``'s).
        flush: Write the values of cached nodes now (one segment per chunk); False leaves
            them queued for :func:`~flowdata.run.caching.samplecache.flush_queued` (a
            ``Sequential`` group's one-sample chunks are written a few hundred at a time).
    """
    t0 = time.perf_counter()
    if span is None:
        span = (indices[0], indices[-1] + 1) if len(indices) else (0, 0)
    with guarded_calls(spec.timeout, spec.watch if worker != "main" else None) as bounded:
        result, skipped = _compute_all(nodes, spec, whole, indices, items, worker, skip, bounded, span, flush)
    result.span, result.skipped = span, skipped
    if spec.cache:
        from flowdata.run.caching.store import take_notes

        result.notes = take_notes()
    if spec.folds and result.failure is None:
        for fold in spec.folds:
            if fold.column not in spec.want:
                result.columns.pop(fold.column, None)
    result.seconds = time.perf_counter() - t0
    return result


def _compute_all(
    nodes: Mapping[str, Node],
    spec: PassSpec,
    whole: Mapping[str, Any],
    indices: Sequence[int],
    items: Sequence[Any],
    worker: str,
    skip: bool,
    bounded: Callable[..., Callable[..., Any]] | None,
    span: tuple[int, int],
    flush: bool = True,
) -> tuple[ChunkResult, list[Failure]]:
    """The chunk computed, with failing samples left out under ``skip``; and those left out."""
    skipped: list[Failure] = []
    while True:
        result = _compute(nodes, spec, whole, indices, items, worker, bounded, flush)
        if result.failure is None and spec.folds:
            result.failure = non_finite(nodes, spec, result.columns, indices, items)
            if result.failure is None:
                result.failure = _fold(spec, result, span, indices, items)
        if result.failure is None or not skip or result.failure.fatal:
            break
        # Leave the failing sample out and compute the chunk again without it.
        pos = list(indices).index(result.failure.index)
        skipped.append(result.failure)
        indices = [*indices[:pos], *indices[pos + 1 :]]
        items = take(items, [q for q in range(len(items)) if q != pos])  # a table's rows stay a record batch
    return result, skipped


def _compute(
    nodes: Mapping[str, Node],
    spec: PassSpec,
    whole: Mapping[str, Any],
    indices: Sequence[int],
    items: Sequence[Any],
    worker: str,
    bounded: Callable[..., Callable[..., Any]] | None = None,
    flush: bool = True,
) -> ChunkResult:
    n = len(items)
    cols: dict[str, Sequence[Any]] = {spec.group: items, "sample_index": indices}
    timing: dict[str, float] = {}
    # With cache=: each node computes only the samples something still needs it for.
    cache = ChunkCache(spec, nodes, indices, items) if spec.cache else None
    subset = cache is not None and cache.any_hit
    for position, name in enumerate(spec.computes):
        node = nodes[name]
        at = cache.compute[name] if cache is not None and subset else None
        m = n if at is None else len(at)
        sub = indices if at is None else [indices[p] for p in at]
        fn = node.fn if bounded is None else bounded(node.fn, position, sub)
        args: list[Any] = []
        for p in node.params:
            if p.name == "sample_rng" and p.name not in cols and p.name not in whole:
                # One generator per sample, shared by every node of the chunk that reads it.
                cols["sample_rng"] = [make_rng(spec.seed, spec.epoch, i) for i in indices]
            if p.name in cols:
                col = cols[p.name]
                args.append(col if at is None else take(col, at))
            elif p.name in whole:
                args.append(repeat(whole[p.name], m))
            else:
                args.append(repeat(p.default, m))
        out: Sequence[Any] = []
        t = time.perf_counter()
        try:
            if m == 0:
                pass
            elif node.vectorized:
                out = _vectorized(node, fn, args, m, out, whole_call=bounded is None)  # type: ignore[arg-type]
            elif node.positional_call:
                out.extend(map(fn, *args))  # type: ignore[attr-defined]
            else:
                names = tuple(p.name for p in node.params)
                out.extend(map(_call_kw, repeat(fn), repeat(names), zip(*args)))  # type: ignore[attr-defined]
        except (Exception, SystemExit, SampleTimeout) as exc:  # sys.exit() in a node is that node's failure
            # list.extend keeps what it appended before the error: len(out) is the failing sample
            # (a column that cannot be stacked names its own).
            k = exc.position if isinstance(exc, ColumnError) else len(out)
            i = k if at is None else at[k]
            if cache is not None:  # the chunk is computed again, or fails: nothing of it is written
                cache.drop()
            return ChunkResult(indices, {}, _failure(name, node.location, indices[i], items[i], exc), 0.0, worker)
        timing[name] = time.perf_counter() - t
        if out and contradicts(out[0], node.type):  # each chunk's first value: one isinstance per node
            i = 0 if at is None else at[0]
            error = return_type_error(node, out[0])
            if cache is not None:  # the chunk is computed again, or fails: nothing of it is written
                cache.drop()
            return ChunkResult(indices, {}, _failure(name, node.location, indices[i], items[i], error), 0.0, worker)
        if cache is not None:
            bad = cache.write(name, range(n) if at is None else at, out)
            if bad is not None:
                i, err = bad
                cache.drop()  # the chunk is computed again, or fails: nothing of it is written
                return ChunkResult(indices, {}, _failure(name, node.location, indices[i], items[i], err), 0.0, worker)
        if at is not None:
            out = cache.merged(name, at, out)  # type: ignore[union-attr]
        cols[name] = out
    size = sum(col.row_bytes() if isinstance(col, Column) else approx_bytes(col[0]) for name, col in cols.items()
               if name != "sample_index" and len(col) and (isinstance(col, Column) or col[0] is not None))
    wanted = set(spec.want) | {f.column for f in spec.folds}
    columns = {w: list(cols[w]) if w == spec.group else cols[w] for w in wanted}
    result = ChunkResult(indices, columns, None, 0.0, worker, node_seconds=timing, sample_bytes=size)  # type: ignore[arg-type]
    if cache is not None:
        if flush:
            cache.flush()
        result.cache = cache.counts
    return result


def _vectorized(node: Node, fn: Callable[..., Any], args: list[Any], n: int, out: list[Any],
                whole_call: bool) -> Sequence[Any]:
    """A ``@vectorized`` node's values for the chunk: one call on the chunk's values, each
    per-sample parameter in its form (a list, or a column: :func:`flowdata.columns.as_form`);
    a returned tensor, array or Arrow object stays one column. If the call raises, one call
    per sample, appended to ``out``, so that an error is the failing sample's (``len(out)``
    is its position when this raises). Under ``timeout=`` (not ``whole_call``) every call is
    one sample's, bounded like any node's."""
    per_sample = [not isinstance(a, repeat) for a in args]
    values: list[Any] = [a if ps else next(a, None) for a, ps in zip(args, per_sample, strict=True)]
    if whole_call and n > 1:
        try:
            # A conversion that fails (a column of mixed types to a record batch, say) is
            # found again below, on the sample whose value cannot be converted.
            formed = [_formed(node, p, v) if ps else v for p, v, ps in zip(node.params, values, per_sample, strict=True)]
            got = _call_on(node, fn, formed)
        except ColumnError:
            raise
        except (Exception, SystemExit, SampleTimeout):
            got = _RAISED  # found again below, on the sample that fails
        if got is not _RAISED:
            # Not one value per sample is the function's fault, whatever the samples: an error
            # (on the chunk's first sample, len(out) == 0), never a silent rerun per sample.
            return vector_values(node, got, n)
    for i in range(n):
        one = [_formed(node, p, take(v, (i,))) if ps else v
               for p, v, ps in zip(node.params, values, per_sample, strict=True)]
        out.append(vector_values(node, _call_on(node, fn, one), 1)[0])
    return out


class ColumnError(TypeError):
    """A columnar parameter's values that cannot be stacked (their shapes differ): a fault
    of the graph, not of a sample (raised under ``on_error="skip"`` too), named at the first
    value whose shape differs (``position`` in the chunk)."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


def _formed(node: Node, p: Any, values: Sequence[Any]) -> Any:
    """A per-sample parameter's values in its form; values that cannot be stacked a
    :class:`ColumnError` naming the node and the parameter."""
    try:
        return as_form(values, p.form)
    except StackError as err:
        raise ColumnError(
            f"'{node.name}' is @vectorized and takes '{p.name}' as {type_name(p.type)}, the chunk's values stacked, "
            f"but {err}\n  fix: give '{p.name}' values of one shape (pad or crop them), or annotate the parameter "
            f"as '{p.name}: Sequence[{type_name(p.type)}]' (a list of the values)", err.position) from None


def _call_on(node: Node, fn: Callable[..., Any], values: list[Any]) -> Any:
    return fn(*values) if node.positional_call else fn(**{p.name: v for p, v in zip(node.params, values, strict=True)})


def vector_values(node: Node, got: Any, n: int) -> list[Any]:
    """What a ``@vectorized`` node returned for ``n`` samples, as a sequence of ``n`` values:
    a tensor, an array or an Arrow object kept whole as a :class:`~flowdata.columns.Column`
    (its rows are the values), a list as it is; an error if it is not one value per sample."""
    if isinstance(got, (str, bytes, dict)) or not hasattr(got, "__len__"):
        raise ReturnTypeError(f"@vectorized node '{node.name}' returned {type(got).__name__}, not a sequence with one "
                              "value per sample\n  fix: return a list with one value per sample of the lists it is "
                              "given, in order (or a tensor or array whose rows are those values)")
    column = as_column(got)
    if column is not None and len(column) == n:
        return column  # type: ignore[return-value]
    if len(got) != n:
        raise ReturnTypeError(f"@vectorized node '{node.name}' returned {len(got)} value{'s' if len(got) != 1 else ''} "
                              f"for {n} "
                              f"sample{'s' if n != 1 else ''}; it must return one value per sample, in order\n"
                              f"  fix: return one value per sample of the lists it is given ({n} here), in order "
                              "(a tensor or array: one row per sample)")
    return list(got)


class ReturnTypeError(TypeError):
    """A node returned a value its return annotation rules out (found on the first sample
    of each chunk), or a ``@vectorized`` node not one value per sample. A fault of the
    node, not of a sample, so raised under ``on_error="skip"`` too: skipping would leave out
    every sample, one chunk's first at a time."""


_RAISED: Any = object()


def return_type_error(node: Node, value: Any) -> ReturnTypeError:
    """The error of ``node`` returning ``value``, which its annotation rules out."""
    got = type_name(type(value))
    declared = (f"is @vectorized with values declared {type_name(node.type)}" if node.vectorized else
                f"is declared '-> {type_name(node.type)}'")
    return ReturnTypeError(
        f"'{node.name}' {declared}, but returned {got} {short_repr(value, 60)}; its consumers were "
        f"checked against {type_name(node.type)}\n"
        f"  fix: make '{node.name}' return {type_name(node.type)}, or correct its annotation (to {got}?)"
    )


def failure_of(node: Node, index: int, item: Any, exc: BaseException) -> Failure:
    """The failure of ``node`` on one sample, as plain data."""
    return _failure(node.name, node.location, index, item, exc)


def _failure(node: str, location: str, index: int, item: Any, exc: BaseException, reduction: bool = False) -> Failure:
    exc.__traceback__ = user_traceback(exc.__traceback__)
    return Failure(
        node=node,
        location=location,
        index=index,
        item=item if isinstance(item, str) and reduction else short_repr(item),
        detail=describe(exc),
        error=exc,
        traceback_text="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        reduction=reduction,
        fatal=isinstance(exc, (ReturnTypeError, ColumnError)),
    )


def _fold(spec: PassSpec, result: ChunkResult, span: tuple[int, int], indices: Sequence[int],
          items: Sequence[Any]) -> Failure | None:
    """Folds the chunk's values; the failure of a value the reducer cannot fold, if any.

    A value the reducer refuses is that sample's failure, named by the reduction (raised or
    skipped like any other); an error no single value explains stops the pass.
    """
    for fold in spec.folds:
        try:
            result.pieces[fold.node] = pieces_of(fold, span, indices, result.columns[fold.column])
        except BlockError as err:
            cause = err.__cause__ if isinstance(err.__cause__, Exception) else err
            if isinstance(err, ValueFoldError):
                pos = list(indices).index(err.index)
                failure = _failure(fold.node, fold.location, err.index, items[pos], cause)
                return dataclasses.replace(failure, reproduce=fold.column)
            return _failure(fold.node, fold.location, err.block * BLOCK, err.samples, cause, reduction=True)
    return None


def non_finite(
    nodes: Mapping[str, Node], spec: PassSpec, columns: Mapping[str, Sequence[Any]], indices: Sequence[int],
    items: Sequence[Any],
) -> Failure | None:
    """The failure of the first sample whose value a reduction would fold holds NaN or inf.

    A non-finite value is a bad sample (one NaN would make the statistics, and every value
    normalised by them, NaN): it fails -- or is skipped -- like a node that raised, unless
    the reduction was declared with an explicit ``nan=`` option (``@reduce(Welford,
    nan="propagate")``, or ``"ignore"``), which then decides.
    """
    for fold in spec.folds:
        if "nan" in fold.reducer.options or "nan" in fold.options:
            continue
        values = columns.get(fold.column, ())
        if isinstance(values, Stacked) and _finite(values.data):
            continue  # one check for the chunk's stacked values
        if isinstance(values, Column) and not isinstance(values, Stacked) and not _arrow_non_finite(values.data):
            continue  # rows are dicts, which are never checked; an Arrow array of numbers at once
        if not isinstance(values, Column) and not any(k is float or hasattr(k, "dtype") for k in set(map(type, values))):
            continue  # no value that can be NaN (text, integers, lists): nothing to look at one by one
        for pos, value in enumerate(values):
            if not _finite(value):
                node = nodes[fold.column]
                exc = ValueError(
                    f"'{fold.column}' is not finite (NaN or inf), and reduction '{fold.node}' folds it; "
                    f"to fold such values, declare @reduce(..., nan='propagate') or nan='ignore'"
                )
                return _failure(node.name, node.location, indices[pos], items[pos], exc)
    return None


def _arrow_non_finite(data: Any) -> bool:
    """Whether an Arrow array (or record batch) may hold NaN or inf: a float array that
    does; anything else (rows, text, integers) never."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(data, (pa.Array, pa.ChunkedArray)) or not pa.types.is_floating(data.type):
        return False
    return bool(pc.any(pc.invert(pc.is_finite(data))).as_py())


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    dtype = getattr(value, "dtype", None)
    if dtype is None or not hasattr(value, "shape"):
        return True
    kind = getattr(dtype, "kind", None)
    if kind is not None:  # numpy (already imported: it made the value)
        import numpy as np

        return kind not in "fc" or bool(np.isfinite(value).all())
    if getattr(dtype, "is_floating_point", False) or getattr(dtype, "is_complex", False):  # torch
        import torch

        if value.device.type == "cpu" and value.dtype in (torch.float32, torch.float64) and value.numel() > 4096:
            import numpy as np

            # A chunk's stacked values: numpy, single-threaded. torch would spread the sum
            # over its thread pool, whose threads spin against the other work of the process.
            return bool(np.isfinite(value.detach().numpy()).all())
        # A sum is finite only when every value is (NaN and inf propagate), and costs a
        # tenth of torch.isfinite(...).all() on a small tensor; an overflowing sum of
        # finite values falls back to the exact check.
        total = value.sum()
        if math.isfinite(float(total)) if not total.is_complex() else bool(torch.isfinite(total)):
            return True
        return bool(torch.isfinite(value).all())
    return True


def portable(f: Failure | None) -> Failure | None:
    """The failure, with its exception dropped if it cannot travel back (its text stays)."""
    if f is None or f.error is None:
        return f
    try:
        pickle.dumps(f.error)
    except Exception:
        return dataclasses.replace(f, error=None)
    return f
