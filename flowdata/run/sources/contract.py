"""The Source contract: what every source of a group's samples gives the engine.

- ``open()`` iterates the items in sample order. It is *guarded* (:func:`guarded`): an
  error raised while producing an item becomes a ``NodeError`` naming the source function,
  its ``file:line`` and the sample index -- in ``execute()``, ``run_sample()`` and both
  loaders alike;
- ``index()`` gives random access (:class:`ItemIndex`), or None for a plain iterable;
- ``fingerprint()`` digests the items (and the size and modification time of every file
  they name) for the pass cache;
- ``shard(rank, world_size)`` gives the ``(index, item)`` pairs one of several ranks takes.

The adapters (:mod:`flowdata.run.sources.adapters`, :mod:`flowdata.run.sources.sharded`) import this module;
it imports none of them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from flowdata.errors import NodeError, describe, user_traceback
from flowdata.node import Node

__all__ = ["ItemIndex", "Source", "guarded"]


@runtime_checkable
class ItemIndex(Protocol):
    """Random access to a group's items."""

    def __len__(self) -> int: ...

    def take(self, indices: Sequence[int]) -> list[Any]:
        """The items at ``indices``, in that order."""
        ...

    def __iter__(self) -> Iterator[Any]: ...


@runtime_checkable
class Source(Protocol):
    """Where a group's samples come from (see the module docstring)."""

    node: Node

    def open(self) -> Iterator[Any]:
        """The items in sample order; a failure names the source function."""
        ...

    def index(self) -> ItemIndex | None:
        """Random access to the items, or None."""
        ...

    def fingerprint(self) -> tuple[str, int]:
        """(digest, count) of the items, for the pass cache."""
        ...

    def shard(self, rank: int, world_size: int) -> Iterator[tuple[int, Any]]:
        """The ``(index, item)`` pairs rank ``rank`` of ``world_size`` takes."""
        ...


def guarded(items: Iterable[Any], source: Node, start: int = 0, where: str = "") -> Iterator[Any]:
    """The items; an error raised while producing one is the source's ``NodeError``.

    Inside a DataLoader worker, the items are produced with the worker hidden
    (:func:`_next_unsplit`): flowdata decides which process reads what, so a library that
    splits its data by ``get_worker_info()`` (Hugging Face's ``IterableDataset`` does) must
    not split it again. ``where`` says more about the sample: ``{}`` is its position among the items.
    """
    it = iter(items)
    index = start
    try:
        while True:
            try:
                item = _next_unsplit(it)
            except StopIteration:
                return
            except Exception as exc:
                raise NodeError(
                    source.name, source.location,
                    f"{describe(exc)} (while producing sample {index}{where.format(index - start)})",
                ) from exc.with_traceback(user_traceback(exc.__traceback__))
            yield item
            index += 1
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _next_unsplit(it: Iterator[Any]) -> Any:
    """``next(it)`` with torch's DataLoader worker information hidden, inside a worker."""
    worker = sys.modules.get("torch.utils.data._utils.worker")
    info = getattr(worker, "_worker_info", None)
    if info is None:
        return next(it)
    worker._worker_info = None  # type: ignore[union-attr]
    try:
        return next(it)
    finally:
        worker._worker_info = info  # type: ignore[union-attr]
