"""``@reduce``: a Collect node whose values are folded into a reducer, in the workers.

::

    @reduce(Welford, dim=(0, 2))
    def feature_stats(feature: Collect[torch.Tensor]) -> Stats:
        raise NotImplementedError("@reduce folds the values; the body is not called")

The body is not called (as with Hamilton's ``@does``). It raises rather than being ``...``:
mypy reports a ``...`` body under a return type as ``empty-body``, whatever the decorator.

The node has exactly one ``Collect[...]`` parameter; its other parameters (whole values
such as histogram edges) are passed to the reducer's constructor as keyword arguments,
together with the options given to ``@reduce``. The declared return type must accept the
reducer's ``result()`` type (checked at build time, FD301).

The reducer contract
--------------------
A reducer accumulates the values of one Collect parameter, sample by sample::

    class Reducer(Protocol[R]):
        def update(self, value) -> None: ...          # fold one sample's value
        def merge(self, other) -> Self: ...            # fold another reducer's state in
        def result(self) -> R: ...                     # the final value
        def state_dict(self) -> dict[str, np.ndarray]: ...
        @classmethod
        def from_state_dict(cls, state) -> Self: ...

It must pickle (workers send reducers back), and ``state_dict`` holds plain numpy arrays
only, so the pass cache stores it as ``.npz`` without pickle. A reducer may also define
``fold(values)`` to take a whole block at once (Welford stacks the values into one batch);
without it flowdata calls ``update`` for each value. A reducer whose ``merge`` is exact and
associative -- integer counts, minima and maxima -- may say so with a class attribute
``exact = True``: the workers then merge the whole blocks of a chunk before sending them
back (the result is the same by that property; floating-point sums are not exact).

Determinism: samples are folded in fixed blocks of :data:`BLOCK` consecutive sample
indices, each block into a fresh reducer, and the block reducers are merged in index
order. Which process folds a block never changes the arithmetic, so results are bitwise
identical for any number of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BLOCK", "ReduceSpec", "Reducer", "fold_values", "reduce", "reduce_spec", "result_type"]

F = TypeVar("F", bound=Callable[..., Any])

_ATTR = "__flowdata_reduce__"


@dataclass(frozen=True)
class ReduceSpec:
    """The reducer class of a reduction node and the options for its constructor."""

    cls: type[Any]
    options: Mapping[str, Any] = field(default_factory=dict)

    def make(self, **whole: Any) -> Any:
        """A fresh reducer, with whole-valued parameters added to the options."""
        return self.cls(**self.options, **whole)


def reduce(reducer: type[Any], **options: Any) -> Callable[[F], F]:
    """Declares a Collect node as a reduction: flowdata folds its values into ``reducer``.

    Args:
        reducer: A class following the reducer contract (``flowdata.stats.Reducer``).
        **options: Keyword arguments for the reducer's constructor.
    """
    if not isinstance(reducer, type):
        raise TypeError(f"@reduce expects a reducer class such as Welford, got {reducer!r}")

    def decorate(fn: F) -> F:
        setattr(fn, _ATTR, ReduceSpec(reducer, dict(options)))
        return fn

    return decorate


def reduce_spec(fn: Callable[..., Any]) -> ReduceSpec | None:
    """The ``@reduce`` spec of a function, if it has one."""
    spec = getattr(fn, _ATTR, None)
    return spec if isinstance(spec, ReduceSpec) else None


BLOCK = 64
"""Samples per fold block. Fixed: changing it changes the floating-point results."""

R_co = TypeVar("R_co", covariant=True)


@runtime_checkable
class Reducer(Protocol[R_co]):
    """A mergeable accumulator over the values of one Collect parameter."""

    def update(self, value: Any) -> None:
        """Folds one sample's value in."""
        ...

    def merge(self, other: Any) -> Any:
        """Folds another reducer of the same kind in (in place); returns self."""
        ...

    def result(self) -> R_co:
        """The value the reduction node returns."""
        ...

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as plain numpy arrays (no objects, so no pickle on disk)."""
        ...


def fold_values(reducer: Any, values: Sequence[Any]) -> Any:
    """Folds ``values`` into ``reducer`` in order (``fold`` when it has one); returns it."""
    fold = getattr(reducer, "fold", None)
    if fold is not None:
        fold(values)
    else:
        for v in values:
            reducer.update(v)
    return reducer


def result_type(cls: type[Any]) -> Any:
    """The return annotation of ``cls.result`` (``Any`` when it has none)."""
    import typing

    try:
        return typing.get_type_hints(cls.result).get("return", Any)
    except Exception:  # an unresolvable annotation: do not block the graph on it
        return Any
