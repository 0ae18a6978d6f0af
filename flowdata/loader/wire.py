"""What crosses from a DataLoader worker to the loader: one message per batch.

A :class:`Batch` is the collated batch plus what happened computing it (samples
delivered and skipped, a failure, node timings, which worker). Small tensors travel inline
through the pipe as numpy arrays; collation is column by column.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data._utils.collate import default_collate

from flowdata.columns import Column, Stacked
from flowdata.errors import FlowdataError
from flowdata.run import ChunkResult, Failure

__all__ = ["INLINE_BYTES", "Batch", "CollateError", "collate"]


class Batch:
    """What a worker sends back: the collated batch and what happened computing it."""

    __slots__ = ("data", "indices", "skipped", "failure", "node_seconds", "worker", "error", "lane", "cache",
                 "padding", "remainder", "notes")

    def __init__(
        self,
        data: Any,
        indices: list[int],
        skipped: list[Failure],
        failure: Failure | None,
        node_seconds: dict[str, float],
        worker: str,
        error: BaseException | None = None,
        lane: int | None = None,
        cache: dict[str, list[int]] | None = None,
        padding: int = 0,
        remainder: int = -1,
        notes: list[tuple[str, str, str]] | None = None,
    ):
        self.data = data
        self.indices = indices
        self.skipped = skipped
        self.failure = failure
        self.node_seconds = node_seconds
        self.worker = worker
        self.error = error  # a flowdata error raised outside the samples (a failing source)
        self.lane = lane  # the lane of a stream in shards it belongs to (flowdata.loader.lanes)
        self.cache = cache or {}  # the sample cache's counts (hits, misses, bytes) per cached node
        self.padding = padding  # its last rows that repeat a sample to even out the ranks
        self.remainder = remainder  # a stream's last batch, evened: samples of the last round (else -1)
        self.notes = notes or []  # the sample cache's warnings, said once by the loader (flowdata.run.caching.passcache.say)

    def __getitem__(self, key: Any) -> Any:
        # Reached only by code that iterates the loader's torch pipeline without the
        # flowdata.DataLoader around it (a library that rebuilt the loader from its
        # attributes, as Accelerate's skip_first_batches() does): say so, not a TypeError.
        raise FlowdataError(
            f"asked for {key!r} of an internal flowdata batch: the loader was rebuilt around its dataset by "
            "another library (such as Accelerate's skip_first_batches()), which bypasses the flowdata.DataLoader "
            "that turns batches into dicts and reports skipped and failed samples\n"
            "  fix: iterate the flowdata.DataLoader itself; to resume mid-epoch, use its state_dict() and "
            "load_state_dict() (accelerator.register_for_checkpointing(loader) saves them with save_state())"
        )

    @classmethod
    def of(cls, result: ChunkResult, data: Any) -> Batch:
        """A batch of a computed chunk, carrying ``data`` (collated or rows)."""
        return cls(data, list(result.indices), result.skipped, result.failure, result.node_seconds, result.worker,
                   cache=result.cache, notes=result.notes)

    def __reduce__(self) -> Any:
        # Small tensors travel inline through the pipe as numpy arrays: torch's shared-memory
        # hand-off (a file descriptor per storage, received, opened and mapped) costs hundreds
        # of µs per tensor, far more than copying a few KB.
        return (_rebuild_batch, (_to_wire(self.data), self.indices, self.skipped, self.failure,
                                 self.node_seconds, self.worker, self.error, self.lane, self.cache,
                                 self.padding, self.remainder, self.notes))

    def pin_memory(self) -> Batch:
        """Pins the batch's tensors (used by the DataLoader's pin-memory thread)."""
        from torch.utils.data._utils.pin_memory import pin_memory

        self.data = pin_memory(self.data)  # type: ignore[no-untyped-call]
        return self


INLINE_BYTES = 1 << 20


class _Inline:
    """A small tensor's values, pickled by value (as a numpy array)."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array


def _to_wire(x: Any) -> Any:
    if type(x) is torch.Tensor:
        if (x.device.type == "cpu" and x.layout == torch.strided and not x.requires_grad
                and x.nbytes <= INLINE_BYTES and not x.is_conj() and not x.is_neg()):
            try:
                return _Inline(x.numpy())
            except (TypeError, RuntimeError):  # a dtype numpy cannot hold (bfloat16, float8, ...)
                return x
        return x
    if type(x) is dict:
        return {k: _to_wire(v) for k, v in x.items()}
    if type(x) in (list, tuple):
        return type(x)(_to_wire(v) for v in x)
    return x


def _from_wire(x: Any) -> Any:
    if type(x) is _Inline:
        return torch.from_numpy(x.array)
    if type(x) is dict:
        return {k: _from_wire(v) for k, v in x.items()}
    if type(x) in (list, tuple):
        return type(x)(_from_wire(v) for v in x)
    return x


def _rebuild_batch(data: Any, *rest: Any) -> Batch:
    return Batch(_from_wire(data), *rest)


def collate_column(column: Sequence[Any]) -> Any:
    """A column collated; a small tensor batch is stacked in ordinary memory (in a worker,
    default_collate allocates shared memory, which pays off only for big batches). Values a
    ``@vectorized`` node returned as one tensor or array are that batch already (the same
    values, dtype and shape as stacking their rows)."""
    if isinstance(column, Column):
        if isinstance(column, Stacked):
            data = column.data
            return data.contiguous() if isinstance(data, torch.Tensor) else torch.as_tensor(data)
        column = column.rows()
    column = column if isinstance(column, list) else list(column)
    first = column[0]
    if type(first) is torch.Tensor and first.nbytes * len(column) <= INLINE_BYTES:
        try:
            return torch.stack(column)
        except (RuntimeError, TypeError):
            pass
    return default_collate(column)  # type: ignore[no-untyped-call]


def collate(
    outputs: Sequence[str], collate_fn: Callable[[list[dict[str, Any]]], Any] | None, columns: Mapping[str, Sequence[Any]],
    n: int
) -> Any:
    """The batch of a computed chunk: a dict of collated columns, or what ``collate_fn`` makes
    of the rows. Raises ``CollateError`` naming the output that could not be collated."""
    if collate_fn is not None:
        cols = {k: c.rows() if isinstance(c, Column) else c for k, c in ((k, columns[k]) for k in outputs)}
        rows = [{k: cols[k][i] for k in outputs} for i in range(n)]
        try:
            return collate_fn(rows)
        except Exception as exc:
            raise CollateError("collate_fn", exc) from exc
    if n == 0:
        return {k: [] for k in outputs}
    out = {}
    for k in outputs:
        try:
            out[k] = collate_column(columns[k])
        except Exception as exc:
            raise CollateError(k, exc) from exc
    return out


class CollateError(Exception):
    """An output's values could not be collated into a batch (ragged shapes, ``None``...)."""

    def __init__(self, output: str, cause: BaseException):
        super().__init__(output, cause)
        self.output, self.cause = output, cause
