"""The dependency graph: nodes, inputs and edges, with pure traversals.

A :class:`Graph` is immutable. Names a node reads that no node produces are *inputs*
(supplied by the caller), except the built-in per-sample values ``sample_index`` and
``sample_rng``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from flowdata.node import Node, Param

__all__ = ["Graph", "InputSpec", "BUILTINS"]

BUILTINS: frozenset[str] = frozenset({"sample_index", "sample_rng"})
"""Per-sample values flowdata provides to any per-sample node that asks for them."""


@dataclass(frozen=True)
class InputSpec:
    """A name no node produces: the caller supplies it.

    Attributes:
        name: The input's name.
        readers: ``(node, param)`` pairs that read it.
        optional: True when every reader has a default for it.
    """

    name: str
    readers: tuple[tuple[Node, Param], ...]

    @property
    def optional(self) -> bool:
        """Whether every reader has a default."""
        return all(p.optional for _, p in self.readers)


@dataclass(frozen=True)
class Graph:
    """Nodes and the edges between them, by name.

    Attributes:
        nodes: Every node, by name, in discovery order.
        inputs: Every input, by name.
        consumers: For each name, the ``(node, param)`` pairs that read it.
    """

    nodes: Mapping[str, Node]
    inputs: Mapping[str, InputSpec]
    consumers: Mapping[str, tuple[tuple[Node, Param], ...]]

    @staticmethod
    def build(nodes: Iterable[Node]) -> Graph:
        """Connects ``nodes`` by parameter names."""
        by_name = {n.name: n for n in nodes}
        consumers: dict[str, list[tuple[Node, Param]]] = {}
        for n in by_name.values():
            for p in n.params:
                consumers.setdefault(p.name, []).append((n, p))
        inputs = {
            name: InputSpec(name, tuple(readers))
            for name, readers in consumers.items()
            if name not in by_name and name not in BUILTINS
        }
        return Graph(
            nodes=MappingProxyType(by_name),
            inputs=MappingProxyType(inputs),
            consumers=MappingProxyType({k: tuple(v) for k, v in consumers.items()}),
        )

    def deps(self, name: str) -> tuple[str, ...]:
        """Names of the nodes ``name`` reads (inputs and built-ins left out)."""
        node = self.nodes.get(name)
        if node is None:
            return ()
        return tuple(p.name for p in node.params if p.name in self.nodes)

    def unread(self, given: Iterable[str]) -> list[str]:
        """The names in ``given`` that are neither an input nor a node: nothing reads them."""
        return [k for k in given if k not in self.inputs and k not in self.nodes]

    def ancestors(self, names: Iterable[str], stop: Collection[str] = ()) -> frozenset[str]:
        """``names`` and every node they depend on, transitively (inputs left out).

        The walk does not go past names in ``stop`` (they are included, their upstream not).
        """
        seen: set[str] = set()
        stack = [n for n in names if n in self.nodes]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n not in stop:
                stack.extend(d for d in self.deps(n) if d not in seen)
        return frozenset(seen)

    def cycles(self) -> list[list[str]]:
        """Every distinct cycle found by a depth-first walk, each as a path ``a -> ... -> a``."""
        state: dict[str, int] = {}  # 1 = on the stack, 2 = done
        found: list[list[str]] = []
        seen_sets: set[frozenset[str]] = set()
        for root in self.nodes:
            if state.get(root):
                continue
            path: list[str] = []
            stack: list[tuple[str, Any]] = [(root, iter(self.deps(root)))]
            state[root] = 1
            path.append(root)
            while stack:
                name, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    path.pop()
                    state[name] = 2
                    continue
                s = state.get(nxt)
                if s == 1:
                    cyc = path[path.index(nxt) :]
                    key = frozenset(cyc)
                    if key not in seen_sets:
                        seen_sets.add(key)
                        # Report in data-flow order: producer first.
                        found.append([*reversed(cyc), cyc[-1]])
                elif s is None:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(self.deps(nxt))))
        return found

    def toposort(self, names: Iterable[str] | None = None) -> tuple[str, ...]:
        """Producers before consumers, stable in discovery order. Assumes no cycle."""
        wanted = set(self.nodes) if names is None else set(names)
        order: list[str] = []
        done: set[str] = set()
        for root in self.nodes:
            if root not in wanted or root in done:
                continue
            stack: list[tuple[str, Any]] = [(root, iter(self.deps(root)))]
            on_stack = {root}
            while stack:
                name, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    on_stack.discard(name)
                    if name not in done:
                        done.add(name)
                        order.append(name)
                elif nxt in wanted and nxt not in done and nxt not in on_stack:
                    on_stack.add(nxt)
                    stack.append((nxt, iter(self.deps(nxt))))
        return tuple(order)
