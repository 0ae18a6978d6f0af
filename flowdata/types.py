"""The markers that shape a graph, and the helpers that read them.

``Parallel[T]`` and ``Sequential[T]`` mark a function's return type: the function is a
*source* and every item it yields is a *sample*. ``Collect[T]`` marks a parameter that
receives every sample's ``T``, in sample order. ``Batch[T]`` marks a parameter that
receives the *collated batch* of a per-sample node, and the return of a node that gives
one value for a whole batch (a *batch node*, run after collation).

The markers are ``Annotated`` aliases, so they are ordinary typing to mypy and pyright:
``Parallel``/``Sequential``/``Collect`` alias ``Iterable[T]`` (a generator annotated
``-> Parallel[str]`` type-checks, and a ``Collect[int]`` parameter is an
``Iterable[int]`` inside the function), ``Batch[T]`` aliases ``T`` itself (a
``Batch[torch.Tensor]`` parameter is the collated tensor). The ``Annotated`` metadata
carries the marker for flowdata to read at run time.
"""

from __future__ import annotations

import types
import sys
import typing
import collections.abc as cabc
from collections.abc import Iterable
from typing import Annotated, Any, Final, Literal, TypeAlias, TypeVar, Union, get_args, get_origin

__all__ = [
    "Batch",
    "Collect",
    "MarkerKind",
    "Parallel",
    "Sequential",
    "is_newtype",
    "is_union",
    "read_marker",
    "strip_annotated",
    "type_name",
]

T = TypeVar("T")

MarkerKind = Literal["parallel", "sequential", "collect", "batch"]


class _Marker:
    """The ``Annotated`` metadata that tells a marker apart from a plain iterable."""

    __slots__ = ("kind",)

    def __init__(self, kind: MarkerKind):
        self.kind: MarkerKind = kind

    def __repr__(self) -> str:
        return f"flowdata.{self.kind}"

    def __reduce__(self) -> str:
        # Markers are singletons: unpickling must give back the same object.
        return f"_{self.kind.upper()}"


_PARALLEL: Final = _Marker("parallel")
_SEQUENTIAL: Final = _Marker("sequential")
_COLLECT: Final = _Marker("collect")
_BATCH: Final = _Marker("batch")

Parallel: TypeAlias = Annotated[Iterable[T], _PARALLEL]
"""Return type of a source whose samples are independent (may run in any order, anywhere)."""

Sequential: TypeAlias = Annotated[Iterable[T], _SEQUENTIAL]
"""Return type of a source whose samples are processed one at a time, in order."""

Collect: TypeAlias = Annotated[Iterable[T], _COLLECT]
"""Parameter type that receives every sample's value of one group, in sample order."""

Batch: TypeAlias = Annotated[T, _BATCH]
"""Parameter type that receives the collated batch of a per-sample node (or the value of
another batch node), and return type of a node that runs once per batch, after collation."""


def read_marker(tp: Any) -> tuple[MarkerKind | None, Any]:
    """Splits a type into (marker kind, element type).

    ``Parallel[str]`` gives ``("parallel", str)``, ``Batch[Tensor]`` gives
    ``("batch", Tensor)``; a type with no marker gives ``(None, tp)``. A bare marker
    without an element type gives ``Any`` as element.
    """
    if get_origin(tp) is Annotated:
        base, *meta = get_args(tp)
        for m in meta:
            if isinstance(m, _Marker):
                if m.kind == "batch":
                    return m.kind, (Any if isinstance(base, TypeVar) else base)
                args = get_args(base)
                return m.kind, (args[0] if args else Any)
    return None, tp


def make_marker(kind: MarkerKind, element: Any) -> Any:
    """The marked type for ``kind`` around ``element`` (used to translate Hamilton's types)."""
    marker = {"parallel": _PARALLEL, "sequential": _SEQUENTIAL, "collect": _COLLECT, "batch": _BATCH}[kind]
    if kind == "batch":
        return Annotated[element, marker]
    return Annotated[Iterable[element], marker]


# --- reading types, for messages and the type checker ---------------------------------------


def strip_annotated(tp: Any) -> Any:
    """Removes ``Annotated`` layers."""
    while get_origin(tp) is typing.Annotated:
        tp = get_args(tp)[0]
    return tp


def is_union(tp: Any) -> bool:
    """Whether ``tp`` is ``A | B`` or ``Union[A, B]``."""
    return get_origin(tp) in (Union, types.UnionType)


def is_newtype(tp: Any) -> bool:
    """Whether ``tp`` was made by ``typing.NewType``."""
    return isinstance(tp, typing.NewType)


def type_name(tp: Any) -> str:
    """A short readable name: ``list[int]``, ``int | None``, ``torch.Tensor``."""
    tp = strip_annotated(tp)
    if tp is None or tp is type(None):
        return "None"
    if tp is Any:
        return "Any"
    if tp is Ellipsis:
        return "..."
    if is_newtype(tp):
        return str(tp.__name__)
    if is_union(tp):
        return " | ".join(type_name(a) for a in get_args(tp))
    origin = get_origin(tp)
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in get_args(tp))}]"
    if origin is not None:
        args = get_args(tp)
        inner = ", ".join(
            "[" + ", ".join(type_name(x) for x in a) + "]" if isinstance(a, list) else type_name(a)
            for a in args
        )
        return f"{type_name(origin)}[{inner}]" if args else type_name(origin)
    if isinstance(tp, type):
        mod = tp.__module__
        if mod in ("builtins",):
            return tp.__qualname__
        if mod.startswith("collections.abc") or mod == "typing":
            return tp.__qualname__
        return f"{_public_module(tp)}.{tp.__qualname__}"
    if isinstance(tp, typing.TypeVar):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _public_module(tp: type) -> str:
    """The shortest module path a class can be imported from: ``torch`` for
    ``torch.Tensor``, ``flowdata.stats`` for ``flowdata.stats.Stats`` (defined in
    ``flowdata.stats.welford``). Read from the modules' namespaces, never importing."""
    parts = tp.__module__.split(".")
    for i in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:i]))
        if module is not None and vars(module).get(tp.__qualname__) is tp:
            return ".".join(parts[:i])
    return tp.__module__


def is_iterator(tp: Any) -> bool:
    """Whether ``tp`` is an ``Iterator``/``Generator``/``Iterable``/``AsyncIterator``
    annotation: a generator's, where a ``Parallel`` or ``Sequential`` source may be meant."""
    return get_origin(tp) in (cabc.Iterator, cabc.Generator, cabc.Iterable, cabc.AsyncIterator)
