"""The pass cache seen from the engine: the key of a pass's reductions, loading, storing.

Storage, digests and file fingerprints live in :mod:`flowdata.run.caching.passcache`; this module decides
what a pass's key covers (see that module's docstring) and restores reducers from it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flowdata.run.caching.passcache import PassCache
from flowdata.run.caching.digest import Unseen, reading
from flowdata.run.caching.fingerprint import code_key, digest, file_stats
from flowdata.run.caching.installed import package_version
from flowdata.discover import Program
from flowdata.node import Node
from flowdata.plan import GroupPlan, PassPlan
from flowdata.report import Skip
from flowdata.run.kernel import FoldSpec
from flowdata.run.sources.adapters import Source

__all__ = ["ReductionCache"]

_log = logging.getLogger("flowdata")


def _versions() -> list[str]:
    """flowdata's version and those of the libraries a reduction's arithmetic runs on (read
    from the installed packages' metadata: the same whether or not they are imported yet)."""
    return [f"{name} {package_version(name)}" for name in ("flowdata", "numpy", "torch")]


_WARNED: set[str] = set()  # what the pass cache warned of (once each per process)


def _code_of(node: Node) -> str:
    try:
        return code_key(node.origin or node.fn)
    except Unseen as exc:
        if not exc.reader:
            exc.reader = f"'{node.name}' ({node.location})"
        raise


class ReductionCache:
    """The reductions of passes, kept in a :class:`~flowdata.run.caching.passcache.PassCache`.

    Args:
        store: Where entries live.
        nodes: The graph's nodes.
        program: The program (its config is part of every key).
    """

    def __init__(self, store: PassCache, nodes: Mapping[str, Node], program: Program):
        self.store = store
        self.nodes = nodes
        self.program = program
        self._bases: dict[tuple[str, int], str] = {}

    def key(
        self,
        group: GroupPlan,
        pass_: PassPlan,
        folds: Sequence[FoldSpec],
        whole: Mapping[str, Any],
        open_source: Callable[[], Source],
        chained: bool,
    ) -> str | None:
        """The key of a pass's reductions, or None when the pass cannot be cached (then it
        runs; when the key cannot see something the pass depends on, a warning says what)."""
        if group.kind == "sequential" or chained:
            return None  # endless streams and sources fed by another group are not fingerprinted
        try:
            with reading():  # one context: state that several nodes reach is hashed once
                return self._key(group, pass_, folds, whole, open_source)
        except Unseen as exc:
            where = f"pass {pass_.number} of group '{group.source}'"
            text = (f"{where} is not cached: its key cannot see {exc}: a stored result would go stale when it changes; "
                    "the pass runs every time (fix: create the object inside a node, or give its class a "
                    "__getstate__ that returns the state the results depend on)")
            if text not in _WARNED:
                _WARNED.add(text)
                _log.warning(text)
            return None

    def _key(self, group: GroupPlan, pass_: PassPlan, folds: Sequence[FoldSpec], whole: Mapping[str, Any],
             open_source: Callable[[], Source]) -> str:
        base = self._bases.get((group.source, pass_.number))
        if base is None:
            items_digest, count = open_source().fingerprint()
            # The code of every node the pass runs and of everything it reaches; inputs and
            # config by value, and every file they name by size and modification time.
            code = [_code_of(self.nodes[n]) for n in (group.source, *pass_.computes)]
            config = sorted(self.program.config.items(), key=repr)
            values = []
            for name, value in sorted(whole.items()):
                try:
                    values.append((name, digest(value)))  # each once: a big tensor is hashed once per build
                except Unseen as exc:
                    raise exc.inside(f"the value of '{name}'") from None
            # The number is the layout of what an entry stores; 7: Welford states hold a
            # shift and the mean about it, so states stored before are not read again.
            base = self._bases[(group.source, pass_.number)] = digest(
                ["flowdata-pass", 7, _versions(), group.source, pass_.number, items_digest, count, code,
                 values, config, file_stats([list(whole.values()), [v for _, v in config]])]
            )
        parts = [
            (f.node, f.column, _code_of(self.nodes[f.node]), code_key(f.reducer.cls),
             sorted(f.reducer.options.items()), sorted(f.options.items()), file_stats(list(f.options.values())))
            for f in folds
        ]
        return digest([base, parts])

    def load(self, key: str, folds: Sequence[FoldSpec], where: str) -> tuple[dict[str, Any], list[Skip]] | None:
        """The reducers stored under ``key`` and the samples the run that stored them
        skipped, or None (missing, corrupt, or not restorable)."""
        if any(getattr(f.reducer.cls, "from_state_dict", None) is None for f in folds):
            return None
        found = self.store.load_entry(key, [f.node for f in folds])
        if found is None:
            return None
        states, about = found
        try:
            reducers = {f.node: f.reducer.cls.from_state_dict(states[f.node]) for f in folds}
            skips = [Skip(int(s["index"]), str(s["item"]), str(s["node"]), str(s["error"]), str(s["group"]),
                          int(s["pass_"])) for s in about.get("skipped", [])]
        except Exception as exc:  # checksums matched, the layout did not: recompute
            _log.warning("cache entry for %s does not restore (%s: %s); recomputing", where, type(exc).__name__, exc)
            return None
        _log.info("%s skipped: %s loaded from the cache (key %s)", where, ", ".join(reducers), key[:12])
        return reducers, skips

    def save(self, key: str, folds: Sequence[FoldSpec], reducers: Mapping[str, Any], where: str,
             about: Mapping[str, Any], skipped: Sequence[Skip] = ()) -> None:
        """Stores the reducers of a pass under ``key`` (those that can be restored), with the
        samples skipped so far in its group: a later run that loads them leaves the same
        samples out of its epochs as this one."""
        if any(not hasattr(f.reducer.cls, "from_state_dict") for f in folds):
            return
        states = {f.node: reducers[f.node].state_dict() for f in folds}
        record = {**about, "skipped": [dataclasses.asdict(s) for s in skipped]}
        entry = self.store.store(key, states, record)
        if entry is not None:
            _log.info("%s: %s stored in the cache at %s", where, ", ".join(states), entry)
