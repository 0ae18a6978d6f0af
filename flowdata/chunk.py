"""Per-sample work on one chunk of samples, column by column.

A chunk is a run of consecutive samples of one group. For each per-sample node, in
dependency order, the node's function is mapped over the chunk's columns at once (one
Python call per sample, no per-sample scheduling), so the cost per sample is close to a
plain loop. Whole values (once nodes, inputs, Collect results) are repeated along the
column.

This module runs both in the main process (inline executor) and in worker processes,
where :func:`worker_task` rebuilds the nodes from module names and config once per
process and keeps them.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import pickle
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from flowdata.errors import describe, short_repr, user_traceback
from flowdata.node import Node
from flowdata.reduce import BLOCK, ReduceSpec, fold_values
from flowdata.sample import make_rng

__all__ = ["ChunkResult", "Failure", "FoldSpec", "PassSpec", "block_span", "run_chunk", "worker_task"]


@dataclass(frozen=True)
class FoldSpec:
    """A reduction fed by a pass: which column it folds and how to make its reducer.

    Attributes:
        node: The reduction node.
        column: The per-sample node (or source) whose values it folds.
        reducer: The ``@reduce`` declaration.
        options: Whole-valued parameters of the node, passed to the reducer's constructor.
    """

    node: str
    column: str
    reducer: ReduceSpec
    options: Mapping[str, Any]

    def fresh(self) -> Any:
        """A new, empty reducer."""
        return self.reducer.make(**self.options)


def block_span(start: int, stop: int) -> range:
    """The fold blocks lying wholly inside sample indices ``[start, stop)``."""
    return range(-(-start // BLOCK), stop // BLOCK)


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
    """

    group: str
    number: int
    computes: tuple[str, ...]
    want: tuple[str, ...]
    seed: int = 0
    epoch: int = 0
    folds: tuple[FoldSpec, ...] = ()


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


@dataclass
class ChunkResult:
    """The wanted columns of a chunk, or the failure that stopped it.

    ``indices`` are the samples delivered (skipped ones left out); ``span`` is the range of
    sample indices the chunk covered. For each reduction, ``folds`` holds one reducer per
    fold block lying wholly in the span, and ``loose`` the (indices, values) of the samples
    outside those blocks (the main process completes those blocks, so the arithmetic never
    depends on chunking). ``skipped`` lists the samples left out under ``on_error="skip"``;
    ``node_seconds`` the time spent in each node.
    """

    indices: Sequence[int]
    columns: dict[str, list[Any]]
    failure: Failure | None = None
    seconds: float = 0.0
    worker: str = "main"
    folds: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    loose: dict[str, tuple[list[int], list[Any]]] = field(default_factory=dict)
    span: tuple[int, int] = (0, 0)
    skipped: list[Failure] = field(default_factory=list)
    node_seconds: dict[str, float] = field(default_factory=dict)


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
    """
    t0 = time.perf_counter()
    if span is None:
        span = (indices[0], indices[-1] + 1) if len(indices) else (0, 0)
    skipped: list[Failure] = []
    while True:
        result = _compute(nodes, spec, whole, indices, items, worker)
        if result.failure is None or not skip:
            break
        # Leave the failing sample out and compute the chunk again without it.
        pos = list(indices).index(result.failure.index)
        skipped.append(result.failure)
        indices = [*indices[:pos], *indices[pos + 1 :]]
        items = [*items[:pos], *items[pos + 1 :]]
    result.span, result.skipped = span, skipped
    if spec.folds and result.failure is None:
        _fold(spec, result.columns, indices, result)
        for fold in spec.folds:
            if fold.column not in spec.want:
                result.columns.pop(fold.column, None)
    result.seconds = time.perf_counter() - t0
    return result


def _compute(
    nodes: Mapping[str, Node],
    spec: PassSpec,
    whole: Mapping[str, Any],
    indices: Sequence[int],
    items: Sequence[Any],
    worker: str,
) -> ChunkResult:
    n = len(items)
    cols: dict[str, Sequence[Any]] = {spec.group: items, "sample_index": indices}
    timing: dict[str, float] = {}
    for name in spec.computes:
        node = nodes[name]
        args: list[Any] = []
        for p in node.params:
            if p.name in cols:
                args.append(cols[p.name])
            elif p.name in whole:
                args.append(repeat(whole[p.name], n))
            elif p.name == "sample_rng":
                cols["sample_rng"] = [make_rng(spec.seed, spec.epoch, i) for i in indices]
                args.append(cols["sample_rng"])
            else:
                args.append(repeat(p.default, n))
        out: list[Any] = []
        t = time.perf_counter()
        try:
            if node.positional_call:
                out.extend(map(node.fn, *args))
            else:
                names = tuple(p.name for p in node.params)
                out.extend(map(_call_kw, repeat(node.fn), repeat(names), zip(*args)))
        except Exception as exc:
            # list.extend keeps what it appended before the error: len(out) is the failing sample.
            i = len(out)
            exc.__traceback__ = user_traceback(exc.__traceback__)
            failure = Failure(
                node=name,
                location=node.location,
                index=indices[i],
                item=short_repr(items[i]),
                detail=describe(exc),
                error=exc,
                traceback_text="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            )
            return ChunkResult(indices, {}, failure, 0.0, worker)
        timing[name] = time.perf_counter() - t
        cols[name] = out
    wanted = set(spec.want) | {f.column for f in spec.folds}
    columns = {w: list(cols[w]) if w == spec.group else cols[w] for w in wanted}
    return ChunkResult(indices, columns, None, 0.0, worker, node_seconds=timing)  # type: ignore[arg-type]


def _fold(spec: PassSpec, cols: Mapping[str, Sequence[Any]], indices: Sequence[int], result: ChunkResult) -> None:
    blocks = block_span(*result.span)
    # Positions of the samples inside whole blocks: indices are ascending, gaps are skips.
    lo = bisect.bisect_left(indices, blocks.start * BLOCK) if blocks else 0
    hi = bisect.bisect_left(indices, blocks.stop * BLOCK) if blocks else 0
    for fold in spec.folds:
        values = cols[fold.column]
        states = []
        for b in blocks:
            a, z = bisect.bisect_left(indices, b * BLOCK), bisect.bisect_left(indices, (b + 1) * BLOCK)
            try:
                states.append((b, fold_values(fold.fresh(), values[a:z])))
            except Exception as exc:
                exc.__traceback__ = user_traceback(exc.__traceback__)
                result.failure = Failure(
                    node=fold.node,
                    location="",
                    index=b * BLOCK,
                    item=f"samples {b * BLOCK}..{b * BLOCK + BLOCK - 1}",
                    detail=describe(exc),
                    error=exc,
                    traceback_text="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                    reduction=True,
                )
                return
        result.folds[fold.node] = states
        result.loose[fold.node] = (
            [*indices[:lo], *indices[hi:]],
            [*values[:lo], *values[hi:]],
        )


# --- worker side -------------------------------------------------------------------------

_CONTEXTS: dict[bytes, tuple[Mapping[str, Node], PassSpec, Mapping[str, Any]]] = {}
_PROGRAMS: dict[bytes, Mapping[str, Node]] = {}


def worker_task(task: tuple[bytes, bytes, bytes, tuple[int, int], Sequence[int], Sequence[Any], bool]) -> ChunkResult:
    """Runs one chunk in a worker process.

    ``task`` is ``(context key, program bytes, context bytes, span, indices, items, skip)``.
    The program (module references and config) is loaded once per worker; the context
    (pass and whole values) is unpickled once per pass.
    """
    key, program_bytes, ctx_bytes, span, indices, items, skip = task
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        nodes = _PROGRAMS.get(program_bytes)
        if nodes is None:
            from flowdata.discover import load_program

            nodes = load_program(pickle.loads(program_bytes))
            _PROGRAMS[program_bytes] = nodes
        spec, whole = pickle.loads(ctx_bytes)
        if len(_CONTEXTS) >= 4:
            _CONTEXTS.pop(next(iter(_CONTEXTS)))
        ctx = _CONTEXTS[key] = (nodes, spec, whole)
    nodes, spec, whole = ctx
    result = run_chunk(nodes, spec, whole, indices, items, worker=f"pid {os.getpid()}", skip=skip, span=span)
    result.failure = _portable(result.failure)
    result.skipped = [f for f in map(_portable, result.skipped) if f is not None]
    return result


def _portable(f: Failure | None) -> Failure | None:
    """The failure, with its exception dropped if it cannot travel back (its text stays)."""
    if f is None or f.error is None:
        return f
    try:
        pickle.dumps(f.error)
    except Exception:
        return dataclasses.replace(f, error=None)
    return f
