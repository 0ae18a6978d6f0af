"""The compiler's front: modules and config in, a checked graph out.

:func:`compile_modules` discovers the nodes (:mod:`flowdata.discover`), connects them
(:mod:`flowdata.graph`), type-checks every edge and reduction (:mod:`flowdata.typecheck`)
and analyses roles and groups (:mod:`flowdata.plan`), collecting every problem instead of
stopping at the first. ``Builder.build()`` and ``flowdata check`` both start here.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any

from flowdata.discover import discover, import_file
from flowdata.errors import GraphProblem
from flowdata.graph import Graph
from flowdata.plan import Analysis, analyze
from flowdata.spelling import near, plural_pair
from flowdata.typecheck import check_edges, check_reductions

__all__ = ["Compiled", "compile_modules", "inputs_like_nodes", "load_module"]


@dataclass(frozen=True)
class Compiled:
    """The result of compiling modules: graph, analysis and every problem found."""

    graph: Graph
    analysis: Analysis
    problems: tuple[GraphProblem, ...]


def compile_modules(modules: Sequence[ModuleType], config: Mapping[str, Any], module_overrides: bool = False) -> Compiled:
    """Discovers, connects, type-checks and analyses ``modules``; collects every problem."""
    nodes, problems = discover(modules, config, module_overrides)
    graph = Graph.build(nodes)
    found = list(problems)
    cycles = graph.cycles()
    for cyc in cycles:
        first = graph.nodes[cyc[0]]
        found.append(
            GraphProblem(
                code="FD005",
                title="cycle",
                message=f"the graph has a cycle: {' -> '.join(cyc)}",
                node=first.name,
                locations=tuple(graph.nodes[n].location for n in cyc[:-1]),
                fix="break the cycle: one of these functions must not read the other's output",
            )
        )
    if cycles:
        analysis = Analysis(MappingProxyType({}), MappingProxyType({}), MappingProxyType({}), ())
        found.extend(check_edges(graph, lambda name: False))
    else:
        analysis = analyze(graph)
        found.extend(analysis.problems)
        found.extend(check_edges(graph, analysis.per_sample))
    found.extend(check_reductions(graph))
    return Compiled(graph, analysis, tuple(found))


def load_module(ref: ModuleType | str) -> ModuleType:
    """A module object from a module, a dotted name, or a path to a ``.py`` file."""
    if isinstance(ref, ModuleType):
        return ref
    if ref.endswith(".py") or os.sep in ref:
        path = os.path.abspath(ref)
        name = os.path.splitext(os.path.basename(path))[0]
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == path:
            return sys.modules[name]
        return import_file(name, path)
    return importlib.import_module(ref)


def inputs_like_nodes(graph: Graph, config: Mapping[str, Any]) -> list[str]:
    """FD401: inputs spelt almost like a node (``featurs`` for ``features``): the parameter
    then silently reads an input instead of the node. ``flowdata check`` prints them;
    ``build()`` warns (``InputLikeNodeWarning``)."""
    names = list(graph.nodes)
    found = []
    for name, spec in graph.inputs.items():
        if name in config or len(name) < 4:
            continue
        close = near(name, names)
        if close is None or plural_pair(name, close) or any(n.name == close for n, _ in spec.readers):
            continue  # 'url(urls)', a source reading its plural input, is the usual idiom
        node = graph.nodes[close]
        readers = ", ".join(f"'{n.name}' ({n.location})" for n, _ in spec.readers)
        found.append(
            f"FD401 input-like-a-node: {readers} reads '{name}', which no node makes, so it is an input; "
            f"did you mean node '{node.name}' ({node.location})?\n"
            f"  fix: rename the parameter '{name}' to '{node.name}'; if an input is meant, give it a name no node has"
        )
    return found
