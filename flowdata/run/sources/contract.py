"""The Source contract: what every source of a group's samples gives the engine.

- ``open()`` iterates the items in sample order. It is *guarded* (:func:`guarded`): an
  error raised while producing an item becomes a ``NodeError`` naming the source function,
  its ``file:line`` and the sample index -- in ``execute()``, ``run_sample()`` and both
  loaders alike;
- ``keyed()`` iterates ``(sample index, item)`` pairs in sample order: the indices count
  from 0 by one, except for a stream in shards, whose indices jump from shard to shard
  (:mod:`flowdata.run.sources.sharded`);
- ``index()`` gives random access (:class:`ItemIndex`), or None for a plain iterable; the
  engine and the loader read a chunk's items from it at once (:func:`guarded_take`: a
  table's rows as one record batch, an error naming the sample the source cannot produce);
- ``shards()`` gives a stream in shards as workers read it where they run (:class:`Shards`),
  or None for every other source;
- ``fingerprint()`` digests the items (and the size and modification time of every file
  they name) for the pass cache.

The engine and the loader ask these methods what a source can do; none of them asks which
adapter class it is.

The adapters (:mod:`flowdata.run.sources.adapters`, :mod:`flowdata.run.sources.sharded`) import this module;
it imports none of them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from flowdata.errors import NodeError, describe, user_traceback
from flowdata.node import Node

__all__ = ["ItemIndex", "Shards", "Source", "guarded", "guarded_take", "numbered"]


@runtime_checkable
class ItemIndex(Protocol):
    """Random access to a group's items."""

    def __len__(self) -> int: ...

    def take(self, indices: Sequence[int]) -> Sequence[Any]:
        """The items at ``indices``, in that order (a table's rows may come as one
        :class:`~flowdata.columns.ArrowRows` column)."""
        ...

    def __iter__(self) -> Iterator[Any]: ...


@dataclass(frozen=True)
class Shards:
    """A stream in shards as a worker reads it: what the source returned (it has
    ``num_shards`` and ``shard()``) and how many shards it has."""

    data: Any
    num_shards: int


@runtime_checkable
class Source(Protocol):
    """Where a group's samples come from (see the module docstring)."""

    node: Node

    def open(self) -> Iterator[Any]:
        """The items in sample order; a failure names the source function."""
        ...

    def keyed(self) -> Iterator[tuple[int, Any]]:
        """``(sample index, item)`` in sample order; a failure names the source function."""
        ...

    def index(self) -> ItemIndex | None:
        """Random access to the items, or None."""
        ...

    def shards(self) -> Shards | None:
        """The stream in shards, for workers that read their shards themselves; or None."""
        ...

    def fingerprint(self) -> tuple[str, int]:
        """(digest, count) of the items, for the pass cache."""
        ...


def numbered(items: Iterator[Any]) -> Iterator[tuple[int, Any]]:
    """``(index, item)`` from 0 on; closing it closes ``items`` (a source's generator)."""
    try:
        yield from enumerate(items)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


def guarded_take(index: ItemIndex, indices: Sequence[int], source: Node) -> Sequence[Any]:
    """``index.take(indices)``; an index that raises is the source's ``NodeError``, naming
    the first sample it cannot produce."""
    try:
        return index.take(indices)
    except Exception:
        pass
    items: list[Any] = []
    for i in indices:  # find the sample, as a source that raised while producing it
        try:
            items.extend(index.take([i]))
        except Exception as exc:
            raise NodeError(
                source.name, source.location, f"{describe(exc)} (while producing sample {i})"
            ) from exc.with_traceback(user_traceback(exc.__traceback__))
    return items


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
