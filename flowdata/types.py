"""The three markers that shape a graph, and the helpers that read them.

``Parallel[T]`` and ``Sequential[T]`` mark a function's return type: the function is a
*source* and every item it yields is a *sample*. ``Collect[T]`` marks a parameter that
receives every sample's ``T``, in sample order.

The markers are ``Annotated`` aliases of ``Iterable[T]``, so they are ordinary typing to
mypy and pyright: a generator annotated ``-> Parallel[str]`` type-checks, and a
``Collect[int]`` parameter is an ``Iterable[int]`` inside the function. The ``Annotated``
metadata carries the marker for flowdata to read at run time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Final, Literal, TypeAlias, TypeVar, get_args, get_origin

__all__ = ["Collect", "Parallel", "Sequential", "MarkerKind", "read_marker"]

T = TypeVar("T")

MarkerKind = Literal["parallel", "sequential", "collect"]


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

Parallel: TypeAlias = Annotated[Iterable[T], _PARALLEL]
"""Return type of a source whose samples are independent (may run in any order, anywhere)."""

Sequential: TypeAlias = Annotated[Iterable[T], _SEQUENTIAL]
"""Return type of a source whose samples are processed one at a time, in order."""

Collect: TypeAlias = Annotated[Iterable[T], _COLLECT]
"""Parameter type that receives every sample's value of one group, in sample order."""


def read_marker(tp: Any) -> tuple[MarkerKind | None, Any]:
    """Splits a type into (marker kind, element type).

    ``Parallel[str]`` gives ``("parallel", str)``; a type with no marker gives
    ``(None, tp)``. A bare marker without an element type gives ``Any`` as element.
    """
    if get_origin(tp) is Annotated:
        base, *meta = get_args(tp)
        for m in meta:
            if isinstance(m, _Marker):
                args = get_args(base)
                return m.kind, (args[0] if args else Any)
    return None, tp


def make_marker(kind: MarkerKind, element: Any) -> Any:
    """The marked type for ``kind`` around ``element`` (used to translate Hamilton's types)."""
    marker = {"parallel": _PARALLEL, "sequential": _SEQUENTIAL, "collect": _COLLECT}[kind]
    return Annotated[Iterable[element], marker]
