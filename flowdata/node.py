"""Frozen nodes: what discovery produces and everything after it reads.

A :class:`Node` is one function of a user module (or one node a Hamilton function modifier
generated from it). It knows its parameters and types, never its neighbours: edges live in
:class:`flowdata.graph.Graph`, roles in :class:`flowdata.plan.Plan`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from flowdata.reduce import ReduceSpec
from flowdata.types import MarkerKind, type_name

__all__ = ["Node", "Param", "Role", "NO_DEFAULT"]


class _NoDefault:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_DEFAULT"

    def __reduce__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


class Role(enum.Enum):
    """What a name is in a plan. Decided by the compiler from the graph's shape."""

    INPUT = "input"
    """Supplied by the caller through ``inputs=`` (or a default)."""
    ONCE = "once"
    """Depends on no sample; computed once per call."""
    SOURCE = "source"
    """Returns ``Parallel[T]`` or ``Sequential[T]``; opens a group."""
    PER_SAMPLE = "per-sample"
    """Runs once per sample of its group."""
    COLLECT = "collect"
    """Receives every sample's value of its group; closes the group."""
    BUILTIN = "builtin"
    """``sample_index`` / ``sample_rng``: provided per sample by flowdata."""
    BATCH = "batch"
    """Reads ``Batch[T]`` values: runs once per collated batch of its group, after collation."""


@dataclass(frozen=True)
class Param:
    """One parameter of a node.

    Attributes:
        name: Parameter name, which is also the name of the node or input it reads.
        type: The parameter's type; for ``Collect[T]`` this is ``T``.
        collect: Whether the parameter is ``Collect[...]``.
        default: The default value, or ``NO_DEFAULT``.
        positional: Whether it can be passed by position (used for fast calls).
        as_list: For a Collect parameter: hand it a ``list`` of every value -- Hamilton's
            own ``Collect``, or a function that does not consume the parameter once, on the
            spot (:mod:`flowdata.usage`, decided when the graph is built); else a stream.
        batch: Whether the parameter is ``Batch[...]`` (it receives a collated batch).
        form: For a parameter of a ``@vectorized`` node: how it receives a chunk's
            per-sample values -- ``""`` a list, else the columnar form its annotation asks
            for (``"tensor"``, ``"ndarray"``, ``"record_batch"``, ``"table"``,
            ``"arrow_array"``, ``"chunked_array"``; :mod:`flowdata.columns`).
    """

    name: str
    type: Any
    collect: bool = False
    default: Any = NO_DEFAULT
    positional: bool = True
    as_list: bool = False
    batch: bool = False
    form: str = ""

    @property
    def optional(self) -> bool:
        """Whether the parameter has a default."""
        return self.default is not NO_DEFAULT


@dataclass(frozen=True)
class Node:
    """One computation in the graph.

    Attributes:
        name: Node name (unique in the graph).
        type: Type of the value; for a source, the type of one item.
        source: ``"parallel"`` or ``"sequential"`` for a source, else ``None``.
        params: Parameters in call order.
        fn: The callable that computes it.
        module: Name of the module that defined the originating function.
        function: Qualified name of the originating user function.
        file: Source file of the originating function.
        line: First line of the originating function.
        tags: Tags from Hamilton's ``@tag`` and discovery.
        doc: The function's docstring.
        reducer: The ``@reduce`` declaration of a reduction node, else ``None``.
        origin: The user function the node came from (for its source text).
        positional_call: Whether ``fn`` may be called with positional arguments in
            ``params`` order (plain functions); Hamilton's generated callables take keywords.
        vectorized: Whether the function is ``@vectorized``: called once per chunk, its
            per-sample parameters as lists, returning one value per sample (``type`` is
            then the element type of its declared return).
        batch: Whether the return is declared ``Batch[...]`` (``type`` is then its ``T``).
    """

    name: str
    type: Any
    source: MarkerKind | None
    params: tuple[Param, ...]
    fn: Callable[..., Any] = field(compare=False, repr=False)
    module: str = ""
    function: str = ""
    file: str = "<unknown>"
    line: int = 0
    tags: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False)
    doc: str = field(default="", compare=False, repr=False)
    positional_call: bool = False
    reducer: ReduceSpec | None = None
    origin: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    vectorized: bool = False
    batch: bool = False

    @property
    def location(self) -> str:
        """``file:line`` of the function that defines this node."""
        return f"{self.file}:{self.line}"

    @property
    def signature(self) -> str:
        """A one-line ``name(a: T, ...) -> R`` for messages."""
        ps = ", ".join(f"{p.name}: {_marked(p.type, 'Collect' if p.collect else 'Batch' if p.batch else '')}"
                       for p in self.params)
        ret = _marked(self.type, "Batch" if self.batch else "")
        if self.source:
            ret = f"{self.source.capitalize()}[{ret}]"
        return f"{self.name}({ps}) -> {ret}"

    def param(self, name: str) -> Param:
        """The parameter called ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def collect_params(self) -> tuple[Param, ...]:
        """The ``Collect[...]`` parameters."""
        return tuple(p for p in self.params if p.collect)

    @property
    def batch_params(self) -> tuple[Param, ...]:
        """The ``Batch[...]`` parameters."""
        return tuple(p for p in self.params if p.batch)


def _marked(tp: Any, marker: str) -> str:
    """``Collect[int]``, ``Batch[torch.Tensor]`` or the plain type name."""
    return f"{marker}[{type_name(tp)}]" if marker else type_name(tp)
