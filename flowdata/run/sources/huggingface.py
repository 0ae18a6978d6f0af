"""What flowdata knows of Hugging Face ``datasets``, in one place.

Every attribute of a ``datasets`` object that flowdata reads, private ones included, is
read here, so that a new version of the library that renames one is fixed in this module
alone. ``datasets`` is never imported to ask (a source that returns something else does
not pay for it); only :func:`identity` imports it, for a stream's hash.

- a map-style ``datasets.Dataset`` is used as the index (:func:`is_dataset`): its rows
  are read by batches of indices in one Arrow call (:func:`rows`); it is known by its own
  fingerprint (:func:`fingerprint_of`) and the files its string columns name
  (:func:`named_strings`);
- a ``datasets.IterableDataset`` is a stream in shards (its ``num_shards`` and
  ``shard(num_shards=, index=)``: :func:`shard`), unless a step of it reads across shards
  (:func:`reads_across_shards`) or it is already split by node (:func:`split_by_node`):
  then it is read whole, in order -- and refused by a loader that deals samples to
  several ranks itself (:func:`refuse_split_by_node`);
- a cache key digests a ``datasets`` object by its fingerprint or by ``datasets``' own
  hasher, never by its pickle (:func:`is_datasets_object`, :func:`identity`).

The adapters that use this (``DatasetIndex`` in :mod:`flowdata.run.sources.adapters`,
``ShardedSource`` in :mod:`flowdata.run.sources.sharded`), the pass cache's digest
(:mod:`flowdata.run.caching.digest`) and the ranks' comparison of their items
(:mod:`flowdata.run.distributed.ranks`) import this module; it imports none of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from flowdata.errors import InputError

__all__ = [
    "fingerprint_of",
    "identity",
    "is_dataset",
    "is_datasets_object",
    "named_strings",
    "reads_across_shards",
    "refuse_split_by_node",
    "rows",
    "shard",
    "split_by_node",
]


def is_datasets_object(value: Any) -> bool:
    """Whether ``value`` is an object of the ``datasets`` library (a dataset, a stream, ...)."""
    return type(value).__module__.startswith("datasets.")


def is_dataset(value: Any) -> bool:
    """Whether ``value`` is a map-style ``datasets.Dataset`` (without importing ``datasets``)."""
    t = type(value)
    return t.__name__ == "Dataset" and t.__module__.startswith("datasets.") and hasattr(value, "_fingerprint")


def fingerprint_of(value: Any) -> str | None:
    """A ``datasets.Dataset``'s own fingerprint (derived from its data and every operation
    on it), or None for anything that has none."""
    fingerprint = getattr(value, "_fingerprint", None)
    return fingerprint if isinstance(fingerprint, str) else None


def identity(value: Any) -> str | None:
    """What a cache key reads of a ``datasets`` object, never its pickle (a map-style
    dataset held in memory pickles whole; a stream's generator may be a lambda): a
    ``Dataset``'s fingerprint and length; another object's (a stream's) attributes, hashed
    by ``datasets``' own ``Hasher`` -- its generator's code and arguments, its rows being
    fingerprinted as a source's items. None when the ``Hasher`` cannot hash them."""
    name = type(value).__qualname__
    fingerprint = fingerprint_of(value)
    if fingerprint is not None:
        return f"datasets:{name}:{fingerprint}:{len(value)}"
    from datasets.fingerprint import Hasher

    try:
        # Less the file systems ``datasets`` keeps for its workers (``HfFileSystem._cache``):
        # instances whose pickle differs in every process, so a key that held them would
        # never hit in a new process.
        state = {k: v for k, v in vars(value).items() if not k.endswith("__hffs_cache")}
        return f"datasets:{name}:{Hasher.hash(state)}"
    except Exception:
        return None


def rows(dataset: Any, indices: Sequence[int]) -> list[Any]:
    """The rows of a ``datasets.Dataset`` at ``indices`` (not empty), read in one Arrow
    call (``dataset[indices]``, a dict of columns), one dict per row; a format that gives
    no dict of columns (pandas, arrow): rows as ``dataset[i]`` gives them."""
    got = _rows_of(dataset[list(indices)], len(indices))
    return got if got is not None else [dataset[int(i)] for i in indices]


def _rows_of(batch: Any, n: int) -> list[Any] | None:
    """One row dict per sample of a dict of columns (what ``dataset[indices]`` gives), or
    None when the batch is not one (another format)."""
    if not isinstance(batch, dict):
        return None
    names = list(batch)
    columns = [batch[k] for k in names]
    if any(len(c) != n for c in columns):
        return None  # a transform that changes the number of rows: read row by row
    return [dict(zip(names, values)) for values in zip(*columns)] if names else [{} for _ in range(n)]


def named_strings(dataset: Any) -> Iterator[tuple[str, str]]:
    """``(column, string)`` of every string of a ``datasets.Dataset``'s Arrow table, nested
    ones included (the ``path`` of an undecoded ``Image``/``Audio`` struct, lists of
    paths), without reading its binary columns."""
    import pyarrow as pa

    table = dataset.data
    for field in table.schema:
        for chunk in table.column(field.name).chunks:
            for value in _strings_of(chunk, pa):
                yield field.name, value


def _strings_of(array: Any, pa: Any) -> Iterator[str]:
    """The strings of an Arrow array, nested ones included."""
    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        yield from (v for v in array.to_pylist() if v is not None)
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _strings_of(array.field(i), pa)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _strings_of(array.flatten(), pa)


def shard(data: Any, num_shards: int, index: int) -> Any:
    """Shard ``index`` of ``num_shards`` of a stream: ``datasets.IterableDataset.shard``
    takes them by keyword; another library's ``shard(num_shards, index)``, positional."""
    try:
        return data.shard(num_shards=num_shards, index=index)
    except TypeError:
        return data.shard(num_shards, index)


def split_by_node(stream: Any) -> bool:
    """Whether ``stream`` is a ``datasets.IterableDataset`` already split by node
    (``datasets.distributed.split_dataset_by_node``): read as the library gives it, in
    order, so that its own split applies once."""
    return getattr(stream, "_distributed", None) is not None


# Steps of a datasets.IterableDataset whose result depends on the order across shards:
# take(n)/skip(n) count rows of the whole stream, interleave_datasets() stops or cycles
# over all its sources. Read shard by shard they would keep other rows (datasets divides
# take(n) between the shards), so such a stream is read whole, in order.
_ACROSS_SHARDS = frozenset({
    "TakeExamplesIterable", "SkipExamplesIterable", "CyclingMultiSourcesExamplesIterable",
    "RandomlyCyclingMultiSourcesExamplesIterable", "HorizontallyConcatenatedMultiSourcesExamplesIterable",
})


def reads_across_shards(stream: Any) -> bool:
    """Whether a ``datasets.IterableDataset`` has a step of :data:`_ACROSS_SHARDS`."""
    todo = [getattr(stream, "_ex_iterable", None)]
    seen = 0
    while todo and seen < 1000:
        step = todo.pop()
        seen += 1
        if step is None:
            continue
        if type(step).__name__ in _ACROSS_SHARDS:
            return True
        todo.append(getattr(step, "ex_iterable", None))
        todo.extend(getattr(step, "ex_iterables", None) or ())
    return False


def refuse_split_by_node(source: str, opened: object, world_size: int) -> None:
    """A stream already split by node would be split between ranks twice: refused.

    Args:
        source: The source function's name.
        opened: What the source became (a stream split by node is read whole, in order:
            an ``IterableSource``, whose ``unread`` is the stream).
        world_size: The number of ranks the loader deals samples to.
    """
    stream = getattr(opened, "unread", None)
    if world_size > 1 and split_by_node(stream):
        raise InputError(
            f"source '{source}' returned a stream already split by node (datasets.distributed."
            f"split_dataset_by_node), and the loader deals samples to {world_size} ranks too: each rank "
            "would get a share of its share and the other rows would be lost\n"
            "  fix: return the whole stream (flowdata splits its shards between ranks and workers), or build the "
            "loader with world_size=1 on each node"
        )
