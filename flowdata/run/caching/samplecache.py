"""The decoded-sample cache: which nodes are cached, and the key of every sample's entry.

``cache=[node, ...]`` (with ``cache_dir``) keeps the per-sample values of the named nodes
on disk (:mod:`flowdata.run.caching.store`) and reads them back instead of computing them
again: on a hit, the node is not called, nor anything upstream of it that nothing else
needs (the decode is skipped); nodes downstream are computed from the cached value.

The key of one sample's entry is the digest of

- the node's **base**: the code of the node and of every node upstream of it in its group,
  with everything that code reaches (:func:`~flowdata.run.caching.fingerprint.code_key`: helpers,
  constants, user modules; installed packages by version), the whole values they read
  (inputs, config, once nodes, statistics) by value together with the size and
  modification time of every file those name, the graph's config, and the versions of
  flowdata, numpy and torch. It names the node's folder, so a change of any of these reads
  another folder: nothing stale is ever served;
- the sample's **item**, by value, with the size and modification time of every file it
  names (made once per chunk for every cached node: :mod:`flowdata.run.caching.itemkeys`);
  and its index when a node upstream reads ``sample_index``.

The ``cache_dir`` path itself, ``num_workers``, ``batch_size``, the order of the epoch and
the line numbers of unrelated code are not in the key, so they never make a run miss.

A node that reaches ``sample_rng`` (itself or upstream) cannot be cached: its values change
with the epoch by design, and a cache would freeze the augmentation. Cache the
deterministic prefix (the decoded image) and augment downstream of it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flowdata.columns import Stacked
from flowdata.errors import InputError
from flowdata.node import Node

__all__ = ["CachedNode", "ChunkCache", "SampleCache", "flush_queued", "forget", "store_for"]

_STORES: dict[str, Any] = {}  # folder -> this process's SampleStore


@dataclass(frozen=True)
class CachedNode:
    """One cached node of a pass, as the kernel needs it (plain data: it pickles).

    Attributes:
        name: The node.
        folder: Its entries' folder (named after its base digest).
        base: The digest of everything its values depend on except the sample.
        reads_index: Whether a node upstream reads ``sample_index`` (then part of the key).
        max_bytes: Bytes the sample cache of the ``cache_dir`` may take at most (None: no limit).
    """

    name: str
    folder: str
    base: str
    reads_index: bool
    max_bytes: int | None = None


@dataclass(frozen=True)
class SampleCache:
    """What ``cache=`` asked for: the nodes, where, and how much disk at most.

    Attributes:
        names: The cached nodes.
        directory: The ``cache_dir``.
        max_bytes: Bytes the sample cache of the ``cache_dir`` may take at most (None: no limit).
        upstream: Per cached node, the per-sample nodes of its group it depends on.
    """

    names: tuple[str, ...]
    directory: str
    max_bytes: int | None = None
    upstream: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, names: Sequence[str], directory: str, max_bytes: int | None, nodes: Mapping[str, Node],
           per_sample: Callable[[str], bool], ancestors: Callable[[str], Iterable[str]]) -> SampleCache:
        """Checks ``cache=`` against the graph (see :meth:`check`) and makes it.

        Args:
            names: The nodes to cache.
            directory: The ``cache_dir``.
            max_bytes: ``cache_max_bytes``.
            nodes: The graph's nodes.
            per_sample: Whether a name is a per-sample node (or a source).
            ancestors: A node and everything it depends on.
        """
        made = cls(tuple(names), directory, max_bytes, {
            n: tuple(sorted(a for a in ancestors(n) if a != n and a in nodes and per_sample(a)))
            for n in names if n in nodes and per_sample(n)})
        made.check(nodes, per_sample)
        return made

    def check(self, nodes: Mapping[str, Node], per_sample: Callable[[str], bool]) -> None:
        """Refuses names that are not per-sample nodes (of a ``Parallel`` or a ``Sequential``
        group), and nodes that reach ``sample_rng``."""
        for name in self.names:
            node = nodes.get(name)
            if node is not None and node.batch_params:
                read = ", ".join(repr(p.name) for p in node.batch_params)
                raise InputError(
                    f"cache=[{name!r}]: '{name}' ({node.location}) is a batch node, computed on each collated "
                    "batch where the loader is iterated; only per-sample values are cached\n"
                    f"  fix: cache the per-sample values it reads ({read}) instead"
                )
            if node is None or not per_sample(name) or node.source is not None:
                what = ("no node" if node is None else "a source (its items are read, not computed)"
                        if node.source is not None else "not a per-sample node")
                raise InputError(
                    f"cache=[{name!r}]: {what}; only per-sample values are cached\n"
                    "  fix: name per-sample nodes of the group (the decoded image, the features)"
                )
            random = [n for n in (name, *self.upstream[name]) if any(p.name == "sample_rng" for p in nodes[n].params)]
            if random:
                via = "" if random[0] == name else f" through '{random[0]}' ({nodes[random[0]].location})"
                raise InputError(
                    f"cache=[{name!r}]: node '{name}' ({node.location}) depends on sample_rng{via}, so its values "
                    "change every epoch: a cache would freeze the augmentation\n"
                    "  fix: cache the deterministic node before the random one (the decoded image) and "
                    "augment downstream of it"
                )
        from flowdata.run.caching.digest import reading

        with reading():  # now, not after a statistics pass: what the key cannot see in the code
            for name in self.names:
                _codes(name, nodes, sorted({name, *self.upstream[name]}))

    def attach(self, spec: Any, nodes: Mapping[str, Node], whole: Mapping[str, Any], config: Mapping[str, Any]) -> Any:
        """``spec`` (a :class:`~flowdata.run.kernel.PassSpec`) with the cached nodes it computes."""
        import dataclasses

        from flowdata.run.caching.digest import reading

        with reading():  # one context: state that several cached nodes reach is hashed once
            cached = tuple(self.cached_node(n, nodes, whole, config, self.upstream[n])
                           for n in self.names if n in spec.computes)
        return dataclasses.replace(spec, cache=cached) if cached else spec

    def cached_node(self, name: str, nodes: Mapping[str, Node], whole: Mapping[str, Any], config: Mapping[str, Any],
                    upstream: Sequence[str]) -> CachedNode:
        """The :class:`CachedNode` of ``name`` (its base digest).

        Raises:
            InputError: the key cannot see the state of something the node's values depend
                on (an open file, a lock, a compiled function of the user's own): a cache
                could serve stale values when it changes.
        """
        from flowdata.run.caching.digest import Unseen
        from flowdata.run.caching.fingerprint import digest
        from flowdata.run.caching.fingerprint import file_stats
        from flowdata.run.caching.installed import package_version

        chain = sorted({name, *upstream})
        reads = sorted({p.name for n in chain for p in nodes[n].params if p.name in whole})
        values = [(r, whole[r]) for r in reads]
        settings = sorted(config.items(), key=repr)
        codes = _codes(name, nodes, chain)
        digests = []  # each whole value read once (a big tensor is hashed once per build)
        for i, (r, v) in enumerate([*values, ("", settings)]):
            try:
                digests.append((r, digest(v)))
            except Unseen as exc:
                what = "the config" if i == len(values) else f"the value of '{r}'"
                raise _unseen(name, nodes, f"{exc.inside(what)}") from None
        base = digest([
            "flowdata-sample", 3, [package_version(m) for m in ("flowdata", "numpy", "torch")],
            codes, digests, file_stats([[v for _, v in values], [v for _, v in settings]]),
        ])
        reads_index = any(p.name == "sample_index" for n in chain for p in nodes[n].params)
        folder = os.path.join(self.directory, "samples", f"{name}-{base[:24]}")
        return CachedNode(name, folder, base, reads_index, self.max_bytes)


def _codes(name: str, nodes: Mapping[str, Node], chain: Sequence[str]) -> list[tuple[str, str]]:
    """The code keys of a cached node's chain; an InputError when one cannot see all it reaches."""
    from flowdata.run.caching.digest import Unseen
    from flowdata.run.caching.fingerprint import code_key

    codes = []
    for n in chain:
        try:
            codes.append((n, code_key(nodes[n].origin or nodes[n].fn)))
        except Unseen as exc:
            raise _unseen(name, nodes, f"{exc}" + ("" if n == name else f" (upstream, through '{n}' "
                                                                     f"({nodes[n].location}))")) from None
    return codes


def _unseen(name: str, nodes: Mapping[str, Node], why: str) -> InputError:
    return InputError(
        f"cache=[{name!r}]: the key of '{name}' ({nodes[name].location}) cannot see {why}: a cached value "
        "would go stale when it changes\n"
        "  fix: create the object inside the node (or a once node), give its class a __getstate__ that returns "
        "the state its values depend on (the key reads what pickling would), or leave the node out of cache="
    )


def forget() -> None:
    """Closes this process's stores: the next lookup reads the folders afresh (as a new
    process would)."""
    from flowdata.run.caching import store as samplestore

    for store in _STORES.values():
        store.close()
    _STORES.clear()
    samplestore._SWEPT.clear()  # a new process sweeps the folders again


def store_for(node: CachedNode) -> Any:
    """This process's :class:`~flowdata.run.caching.store.SampleStore` of the node's folder."""
    store = _STORES.get(node.folder)
    if store is None:
        from flowdata.run.caching.store import SampleStore

        store = _STORES[node.folder] = SampleStore(node.folder, node.max_bytes)
    return store


class ChunkCache:
    """The cache's part in computing one chunk: what hit, what each node computes, what to write.

    Args:
        spec: The pass (its ``cache`` names the cached nodes).
        nodes: The nodes.
        indices: The chunk's sample indices.
        items: Their items.

    Raises:
        InputError: an item whose state the key cannot read.
    """

    def __init__(self, spec: Any, nodes: Mapping[str, Node], indices: Sequence[int], items: Sequence[Any]):
        from flowdata.run.caching.digest import Unseen
        from flowdata.run.caching.itemkeys import identities, keys_of

        self.cached = {c.name: c for c in spec.cache}
        self.n = n = len(indices)
        # What the stores held queued before this chunk (one-sample chunks leave theirs queued).
        self._marks = {c.name: store_for(c).queued for c in spec.cache}
        try:
            parts = identities(items)  # once for every cached node
        except Unseen as exc:
            raise InputError(
                f"cache=[{spec.cache[0].name!r}]: the key of a sample cannot see {exc.inside('its item')}\n"
                "  fix: give the source items the key can read (paths, numbers, strings, dicts of those)"
            ) from None
        self.keys: dict[str, list[bytes]] = {}
        self.found: dict[str, dict[int, Any]] = {}  # a node's values read, by position
        self.whole: dict[str, Any] = {}  # a node's values read as the chunk's column (every sample hit)
        self.counts: dict[str, list[int]] = {}  # hits, misses, bytes read, bytes written, not cached
        hit: dict[str, set[int]] = {}
        for c in spec.cache:
            store = store_for(c)
            store.refresh()
            keys = self.keys[c.name] = keys_of(c.base, parts, indices if c.reads_index else None)
            values, column, read = store.read(keys)
            if column is not None:
                self.whole[c.name] = column
                hit[c.name] = set(range(n))
            else:
                self.found[c.name] = values
                hit[c.name] = set(values)
            self.counts[c.name] = [len(hit[c.name]), n - len(hit[c.name]), read, 0, 0]
        self.any_hit = any(hit.values())
        """Whether any cached value was found (else the chunk computes as if uncached)."""
        # What each node computes: the samples something needs it for, less its cache hits.
        wanted = set(spec.want) | {f.column for f in spec.folds}
        need: dict[str, set[int]] = {}
        self.compute: dict[str, list[int]] = {}
        for name in reversed(spec.computes):
            demand = set(range(n)) if name in wanted else need.get(name, set())
            at = sorted(demand - hit.get(name, set()))
            self.compute[name] = at
            for param in nodes[name].params:
                need.setdefault(param.name, set()).update(at)

    def merged(self, name: str, at: Sequence[int], out: Sequence[Any]) -> Sequence[Any]:
        """A node's values for the whole chunk: those it computed (at positions ``at``) and
        those read from the cache; the column read, as it was written, when every sample hit
        (a ``@vectorized`` node's tensor stays one tensor, for the next columnar node and
        collation)."""
        whole = self.whole.get(name)
        if whole is not None:  # every sample hit: nothing computed
            return Stacked(whole)
        if len(at) == self.n:  # every sample computed (a column stays one)
            return out
        full: list[Any] = [None] * self.n
        for q, v in zip(at, out, strict=True):
            full[q] = v
        for q, v in self.found.get(name, {}).items():
            full[q] = v
        return full

    def write(self, name: str, at: Sequence[int], values: Sequence[Any]) -> tuple[int, BaseException] | None:
        """Queues the values a cached node computed (at positions ``at``): a chunk's small
        values of one kind as one column record, others one record each; returns the
        position and error of a value that cannot be stored."""
        from flowdata.run.caching.codec import encode_value
        from flowdata.run.caching.records import pack

        c = self.cached.get(name)
        if c is None or not len(at):
            return None
        store = store_for(c)
        counts = self.counts[name]
        keys = self.keys[name]
        packed = pack(values)
        if packed is not None:
            taken, size = store.put_column([keys[p] for p in at], packed)
            counts[3] += size
            counts[4] += len(at) - taken
            return None
        for p, v in zip(at, values, strict=True):
            try:
                body = encode_value(v)
            except TypeError as exc:
                return p, TypeError(
                    f"cache=[{name!r}] cannot store what '{name}' returned: {exc}; a cached value must come back "
                    "as it went, and tensors, numpy arrays and scalars, numbers, strings, bytes, None, enums, and "
                    "dicts (string keys), lists, tuples and namedtuples of those do\n"
                    f"  fix: return one of those from '{name}' (convert in a node downstream of it), or leave it "
                    "out of cache="
                )
            if store.put(keys[p], body):
                counts[3] += len(body)
            else:
                counts[4] += 1
        return None

    def drop(self) -> None:
        """Forgets the values this chunk queued: a chunk that fails is computed again without
        the failing sample (or not at all), and what it queued would be written twice."""
        for c in self.cached.values():
            store_for(c).drop(self._marks[c.name])
        for counts in self.counts.values():
            counts[3] = counts[4] = 0

    def flush(self) -> None:
        """Writes the queued values (one segment per cached node); those a folder that cannot
        be written did not take are counted as not cached."""
        for name, delta in flush_queued(tuple(self.cached.values())).items():
            counts = self.counts[name]
            counts[:] = [a + b for a, b in zip(counts, delta, strict=True)]


def flush_queued(cached: Sequence[CachedNode]) -> dict[str, list[int]]:
    """Writes what the cached nodes' stores hold queued, one segment each. Returns, per node
    whose folder could not take its values, what to add to the counts already reported for
    them (hits, misses, bytes read, bytes written, not cached): the bytes taken back, the
    values counted as not cached."""
    deltas: dict[str, list[int]] = {}
    for c in cached:
        lost, size = store_for(c).flush()
        if lost:
            deltas[c.name] = [0, 0, 0, -size, lost]
    return deltas
