"""What runs where samples are computed: the per-process node cache and the chunk task.

Nodes travel to other processes as a :class:`~flowdata.discover.Program` (module names
and config); each process rebuilds them once and keeps them here, whichever kind of
worker it is -- an executor's pool worker or a torch DataLoader worker. A pass reaches a
worker as a :class:`PassContext`, sent once per worker by the executor; each chunk is then
only its sample indices and items (:class:`Task`).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowdata.discover import Program, load_program
from flowdata.errors import describe
from flowdata.node import Node
from flowdata.run.kernel import ChunkResult, PassSpec, portable, run_chunk

__all__ = ["PassContext", "Task", "nodes_for", "run_task"]

_NODES: dict[bytes, Mapping[str, Node]] = {}


def nodes_for(program: Program) -> Mapping[str, Node]:
    """The nodes of ``program``, rebuilt once per process."""
    key = pickle.dumps(program)
    nodes = _NODES.get(key)
    if nodes is None:
        nodes = _NODES[key] = load_program(program)
    return nodes


class PassContext:
    """One pass as its workers need it: the program, the pass, its whole values, the policy.

    Pickles without the nodes, which each process rebuilds from the program (the nodes'
    callables may be closures made by Hamilton's modifiers).
    """

    def __init__(
        self,
        program: Program,
        spec: PassSpec,
        whole: Mapping[str, Any],
        skip: bool,
        nodes: Mapping[str, Node] | None = None,
    ):
        self.program = program
        self.spec = spec
        self.whole = dict(whole)
        self.skip = skip
        self._nodes = nodes
        self.local = nodes is not None  # in the process that made it (nodes did not travel)

    def __getstate__(self) -> dict[str, Any]:
        return {"program": self.program, "spec": self.spec, "whole": self.whole, "skip": self.skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def nodes(self) -> Mapping[str, Node]:
        """The nodes, rebuilt in this process on first use when they did not travel."""
        if self._nodes is None:
            self._nodes = nodes_for(self.program)
        return self._nodes

    def describe_unpicklable(self) -> str:
        """Which whole value keeps the context from being sent to another process."""
        for name, value in self.whole.items():
            try:
                pickle.dumps(value)
            except Exception as exc:
                return (
                    f"'{name}' (a {type(value).__name__}) is read by group '{self.spec.group}' but cannot "
                    f"be sent to worker processes: {describe(exc)}\n"
                    "  fix: return a picklable value (no lambdas, open files or locks), or use "
                    "executor='inline'"
                )
        for key, value in self.program.config.items():
            try:
                pickle.dumps(value)
            except Exception as exc:
                return (
                    f"the graph's config cannot be sent to worker processes: '{key}' (a "
                    f"{type(value).__name__}): {describe(exc)}\n"
                    "  fix: use picklable config values, or executor='inline'"
                )
        return "the pass cannot be sent to worker processes\n  fix: use executor='inline'"


@dataclass(frozen=True)
class Task:
    """One chunk: the range of sample indices it covers, the samples kept, their items."""

    span: tuple[int, int]
    indices: Sequence[int]
    items: Sequence[Any]


def run_task(context: PassContext, task: Task) -> ChunkResult:
    """Computes one chunk of a pass (the function every executor maps)."""
    local = context.local
    result = run_chunk(
        context.nodes, context.spec, context.whole, task.indices, task.items,
        worker="main" if local else f"pid {os.getpid()}", skip=context.skip, span=task.span,
    )
    if not local:
        result.failure = portable(result.failure)
        result.skipped = [f for f in map(portable, result.skipped) if f is not None]
    return result
