"""Batch nodes: the work done once per collated batch, after collation.

A batch node reads ``Batch[T]`` values -- the collated batch of a per-sample node, or the
value of another batch node -- and whole values (inputs, once nodes, Collect results), and
returns one value for the whole batch (first dimension: the batch). It never runs in a
DataLoader worker: :class:`BatchStep` is called where the batches arrive --

- the training iterator calls it in the process that iterates the loader, after the batch
  was moved to ``device`` (so the work runs on that device);
- ``execute()`` feeds it like a Collect node: :func:`consume_batches` reads the pass's
  values in sample order, cuts them into batches of ``batch_size``, collates each with
  torch's ``default_collate`` and keeps every batch's value (the result is a list, one value
  per batch);
- ``run_sample()`` calls it on a batch of one sample.

A batch node's value is checked to be batch-shaped: every tensor or array in it must have
the batch's number of rows, so that a node that reduces over the batch by mistake (a
``mean()`` without ``dim``) fails with its name instead of training on a wrong shape.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flowdata.errors import FlowdataError, NodeError, describe, user_traceback
from flowdata.graph import BUILTINS
from flowdata.node import Node
from flowdata.report import Report
from flowdata.sample import make_rng

__all__ = ["BatchStep", "batch_step", "collate_rows", "consume_batches"]


@dataclass(frozen=True)
class BatchStep:
    """The batch nodes of a pass, producers first, and what they read.

    Attributes:
        nodes: The batch nodes to compute, producers first.
        whole: The whole values they read (inputs, once nodes, Collect results).
        outputs: The names the step hands back (per-sample values collated, and batch
            nodes' values), in order.
        report: Where each batch node's time and samples are added (``node_seconds``,
            ``node_calls``), or None.
    """

    nodes: tuple[Node, ...]
    whole: Mapping[str, Any]
    outputs: tuple[str, ...]
    report: Report | None = field(default=None, compare=False)

    @functools.cached_property
    def reads(self) -> tuple[str, ...]:
        """The per-sample values the batch nodes read (collated), in order."""
        made = {n.name for n in self.nodes} | BUILTINS
        return tuple(dict.fromkeys(p.name for n in self.nodes for p in n.batch_params if p.name not in made))

    @functools.cached_property
    def builtins(self) -> frozenset[str]:
        """The built-ins (``sample_index``, ``sample_rng``) the batch nodes read as batches."""
        return frozenset(p.name for n in self.nodes for p in n.batch_params) & BUILTINS

    def __call__(self, batch: Any, indices: Sequence[int], where: Callable[[], str], seed: int = 0,
                 epoch: int = 0) -> dict[str, Any]:
        """Computes the batch nodes on one collated ``batch``.

        Args:
            batch: The collated batch: a dict keyed by per-sample output name.
            indices: The sample indices it holds, in order.
            where: Says which batch this is, for an error message ("batch 3 of epoch 0 (samples
                96-127)"); called only when there is one.
            seed: The seed of the samples' ``sample_rng``.
            epoch: Their epoch.

        Raises:
            NodeError: a batch node raised, or returned a value that is not batch-shaped.
            FlowdataError: the batch is not a dict holding what the batch nodes read (a
                ``collate_fn`` that returns something else).
        """
        if not isinstance(batch, Mapping) or any(r not in batch for r in self.reads):
            missing = [r for r in self.reads if not isinstance(batch, Mapping) or r not in batch]
            node = next(n for n in self.nodes if any(p.name in missing for p in n.batch_params))
            raise FlowdataError(
                f"batch node '{node.name}' ({node.location}) reads {', '.join(repr(m) for m in missing)} from the "
                f"collated batch, but the batch is {_shown(batch)}\n"
                "  fix: let collate_fn return a dict keyed by output name (as torch's default_collate does "
                "with the per-sample dicts), or leave collate_fn out"
            )
        values = dict(batch)
        size = len(indices)
        if size == 0:  # every sample of the batch skipped: nothing to compute
            return {o: values.get(o, []) for o in self.outputs}
        if self.builtins:
            device = next((v.device for v in values.values() if hasattr(v, "device") and hasattr(v, "dtype")), None)
            values.update(self._builtins(indices, seed, epoch, device))
        for node in self.nodes:
            kwargs = {p.name: values[p.name] if p.name in values else self.whole[p.name]
                      for p in node.params if p.name in values or p.name in self.whole}
            start = time.perf_counter()
            try:
                value = node.fn(**kwargs)
            except FlowdataError:
                raise
            except Exception as exc:
                raise NodeError(node.name, node.location, f"{describe(exc)} (on {where()})") from exc.with_traceback(
                    user_traceback(exc.__traceback__))
            if self.report is not None:
                self.report.add_node(node.name, time.perf_counter() - start, size)
            _check_rows(node, value, size, where)
            values[node.name] = value
        return {o: values[o] for o in self.outputs}

    def _builtins(self, indices: Sequence[int], seed: int, epoch: int, device: Any = None) -> dict[str, Any]:
        """``sample_index`` (a tensor, on the batch's device) and ``sample_rng`` (one CPU
        generator per sample, each the one the sample's per-sample nodes get) for the batch
        nodes that read them."""
        out: dict[str, Any] = {}
        if "sample_index" in self.builtins:
            import torch

            out["sample_index"] = torch.tensor(list(indices), dtype=torch.int64, device=device)
        if "sample_rng" in self.builtins:
            out["sample_rng"] = [make_rng(seed, epoch, i) for i in indices]
        return out


def _shown(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return f"a dict of {', '.join(repr(k) for k in list(batch)[:8]) or 'nothing'}"
    return f"a {type(batch).__module__}.{type(batch).__qualname__}".replace("builtins.", "")


def _rows(value: Any) -> Iterator[tuple[str, int]]:
    """``(where, first dimension)`` of every tensor or array inside ``value``."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        yield "", (int(shape[0]) if len(shape) else -1)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from ((f"[{k!r}]{w}", n) for w, n in _rows(v))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from ((f"[{i}]{w}", n) for w, n in _rows(v))


def _check_rows(node: Node, value: Any, size: int, where: Callable[[], str]) -> None:
    for at, rows in _rows(value):
        if rows != size:
            got = "a 0-d value" if rows < 0 else f"{rows} rows"
            raise NodeError(
                node.name, node.location,
                f"it returned {got} in its value{at} on {where()}, which holds {size} samples: a batch node returns "
                f"one row per sample (first dimension: the batch)\n"
                "  fix: keep the batch dimension (reduce with dim=1 or later, not over dim 0), or compute a value "
                "over all samples in a Collect node",
            )


def collate_rows(rows: Mapping[str, list[Any]]) -> dict[str, Any]:
    """Each column of values collated by torch's ``default_collate``."""
    from torch.utils.data import default_collate

    return {k: default_collate(v) for k, v in rows.items()}


def consume_batches(step: BatchStep, batch_size: int, chunks: Iterator[Any], group: str) -> dict[str, list[Any]]:
    """``execute()``'s batch nodes: the pass's values in sample order, cut into batches of
    ``batch_size``, collated and computed; one list per output of ``step``, one value per
    batch (the last batch may be smaller).

    Args:
        step: The batch nodes.
        batch_size: Samples per batch.
        chunks: The pass's chunks (``ChunkResult``), in sample order.
        group: The group's name, for error messages.
    """
    out: dict[str, list[Any]] = {o: [] for o in step.outputs}
    pending: dict[str, list[Any]] = {r: [] for r in step.reads}
    indices: list[int] = []
    number = 0

    def flush(n: int) -> None:
        nonlocal number
        rows = {k: v[:n] for k, v in pending.items()}
        taken = indices[:n]
        where = f"batch {number} of group '{group}' (samples {taken[0]}-{taken[-1]})"
        for k, v in step(collate_rows(rows), taken, lambda: where).items():
            out[k].append(v)
        for v in pending.values():
            del v[:n]
        del indices[:n]
        number += 1

    for chunk in chunks:
        for r in step.reads:
            pending[r].extend(chunk.columns[r])
        indices.extend(chunk.indices)
        while len(indices) >= batch_size:
            flush(batch_size)
    if indices:
        flush(len(indices))
    return out


def batch_step(nodes: Mapping[str, Node], names: Sequence[str], whole: Mapping[str, Any],
               outputs: Sequence[str], report: Report | None = None) -> BatchStep:
    """The :class:`BatchStep` of batch nodes ``names`` (producers first)."""
    return BatchStep(tuple(nodes[n] for n in names), dict(whole), tuple(outputs), report)
