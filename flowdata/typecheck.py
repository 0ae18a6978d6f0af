"""One compatibility function, and the edge checks built on it.

:func:`compatible` answers "can a value of type ``produced`` be handed to a parameter of
type ``expected``?" the way a Python user expects, not the way a strict checker would:

- ``Any`` and ``object`` accept everything; an unresolved or undecidable type is accepted
  (flowdata never blocks a graph on a type it cannot reason about);
- subclasses are accepted, and the numeric tower: ``bool`` -> ``int`` -> ``float`` -> ``complex``;
- ``Optional``/unions: a produced union must fit entirely, an expected union needs one member;
- ``Annotated[T, ...]`` is ``T``; a ``NewType`` is accepted where its base is expected, and
  only the same ``NewType`` (or one derived from it) is accepted where it is expected;
- generics compare their origin by subclass and their arguments *covariantly*, mutable
  containers included (``list[Sub]`` fits ``list[Base]`` and ``Sequence[Base]``; a
  dataflow does not mutate what it is handed); ``list[int]`` never fits ``list[str]``;
  a bare generic (``list``) fits any parametrisation of it and the other way round;
- ``torch.Tensor``, ``np.ndarray`` and other classes are plain classes.
"""

from __future__ import annotations

import collections.abc as cabc
import functools
import numbers
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from flowdata.errors import GraphProblem
from flowdata.graph import BUILTINS, Graph
from flowdata.types import is_newtype as _is_newtype
from flowdata.types import is_union as _is_union
from flowdata.types import strip_annotated as _strip

if TYPE_CHECKING:
    from flowdata.node import Node, Param
from flowdata.types import is_iterator, type_name

__all__ = ["check_edges", "check_reductions", "collated_fits", "collection_element", "compatible", "contradicts",
           "type_name"]

_NUMERIC_TOWER: dict[type, tuple[type, ...]] = {
    int: (float, complex),
    float: (complex,),
}

# One-argument iterables whose argument is the element type.
_ELEMENT_ORIGINS: tuple[type, ...] = (
    cabc.Iterable,
    cabc.Iterator,
    cabc.Collection,
    cabc.Container,
    cabc.Sequence,
    cabc.MutableSequence,
    cabc.Set,
    cabc.MutableSet,
    cabc.Generator,
    cabc.Reversible,
    list,
    set,
    frozenset,
    tuple,
)


def _normalize_none(tp: Any) -> Any:
    return type(None) if tp is None else tp


def compatible(produced: Any, expected: Any) -> bool:
    """Whether a value of type ``produced`` may be passed where ``expected`` is declared."""
    p = _normalize_none(_strip(produced))
    e = _normalize_none(_strip(expected))
    if e is Any or e is object or p is Any or p == e:
        return True
    if isinstance(e, (typing.TypeVar, str, typing.ForwardRef)) or isinstance(
        p, (typing.TypeVar, str, typing.ForwardRef)
    ):
        return True
    if _is_union(p):
        return all(compatible(m, e) for m in get_args(p))
    if _is_union(e):
        return any(compatible(p, m) for m in get_args(e))
    if _is_newtype(e):
        while _is_newtype(p):
            if p is e:
                return True
            p = p.__supertype__
        return False
    if _is_newtype(p):
        return compatible(p.__supertype__, e)
    if get_origin(e) is Literal:
        return get_origin(p) is Literal and set(get_args(p)) <= set(get_args(e))
    if get_origin(p) is Literal:
        return all(compatible(type(v), e) for v in get_args(p))
    return _compatible_classes(p, e)


def _compatible_classes(p: Any, e: Any) -> bool:
    p_origin, e_origin = get_origin(p) or p, get_origin(e) or e
    if p_origin is type(None) or e_origin is type(None):
        return p_origin is e_origin
    if not _subclass(p_origin, e_origin):
        return False
    p_args, e_args = get_args(p), get_args(e)
    if not p_args or not e_args:
        return True  # a bare generic fits any parametrisation, both ways
    if e_origin is tuple:
        return _tuple_fits(p_origin, p_args, e_args)
    if p_origin is tuple:
        return _tuple_into(p_args, e_args)
    if isinstance(p_origin, type) and issubclass(p_origin, cabc.Mapping) and len(e_args) == 1:
        return compatible(p_args[0], e_args[0])  # a mapping iterates over its keys
    if e_origin in (cabc.Callable, Callable) or p_origin in (cabc.Callable, Callable):
        return True  # call signatures are not compared
    if len(p_args) != len(e_args):
        return True  # cannot line the arguments up: do not block the graph
    return all(compatible(pa, ea) for pa, ea in zip(p_args, e_args, strict=True))


def _tuple_fits(p_origin: Any, p_args: tuple[Any, ...], e_args: tuple[Any, ...]) -> bool:
    if p_origin is not tuple:
        return True
    if len(e_args) == 2 and e_args[1] is Ellipsis:
        elems = p_args[:1] if len(p_args) == 2 and p_args[1] is Ellipsis else p_args
        return all(compatible(a, e_args[0]) for a in elems)
    if len(p_args) == 2 and p_args[1] is Ellipsis:
        return False  # an open tuple does not fit a fixed shape
    return len(p_args) == len(e_args) and all(
        compatible(a, b) for a, b in zip(p_args, e_args, strict=True)
    )


def _vectorized_param(name: str, node: Node, p: Param, producer: Node) -> list[GraphProblem]:
    """FD103 for a per-sample parameter of a ``@vectorized`` node that is not a collection
    of what its producer gives (it receives one value per sample of the chunk)."""
    if p.form:
        return _columnar_param(name, node, p, producer)
    element = collection_element(p.type)
    if element is not None and compatible(producer.type, element):
        return []
    produced = type_name(producer.type)
    return [GraphProblem(
        code="FD103",
        title="vectorized-parameter",
        message=(f"'{name}' is @vectorized, so '{p.name}' receives a list of the chunk's values "
                 f"(one {produced} per sample), but it is declared as {type_name(p.type)}"),
        node=name,
        locations=(node.location, producer.location),
        expected=f"{p.name}: Sequence[{produced}]",
        actual=f"{p.name}: {type_name(p.type)}",
        fix=f"annotate the parameter as '{p.name}: Sequence[{produced}]' (or list[{produced}])",
    )]


def _columnar_param(name: str, node: Node, p: Param, producer: Node) -> list[GraphProblem]:
    """FD103 for a columnar parameter (:mod:`flowdata.columns`) its producer's values cannot
    fill: stacked values must be tensors, arrays or numbers; rows of a record batch or
    table must be dicts; an Arrow array takes any values."""
    produced = producer.type
    if p.form in ("tensor", "ndarray"):
        fits = compatible(produced, p.type) or produced in (int, float, bool) or produced is Any
        wanted = f"{type_name(p.type)} (or numbers)"
    elif p.form in ("record_batch", "table"):
        fits = produced is Any or compatible(produced, dict[str, Any])
        wanted = "dict[str, Any] (rows)"
    else:
        return []
    if fits:
        return []
    return [GraphProblem(
        code="FD103",
        title="vectorized-parameter",
        message=(f"'{name}' is @vectorized, so '{p.name}: {type_name(p.type)}' receives the chunk's values as one "
                 f"column, made of {wanted}, but '{p.name}' gives one {type_name(produced)} per sample"),
        node=name,
        locations=(node.location, producer.location),
        expected=f"{p.name}: Sequence[{type_name(produced)}]",
        actual=f"{p.name}: {type_name(p.type)}",
        fix=f"annotate the parameter as '{p.name}: Sequence[{type_name(produced)}]' (a list of the values)",
    )]


def _tuple_into(p_args: tuple[Any, ...], e_args: tuple[Any, ...]) -> bool:
    if len(e_args) != 1:
        return True
    elems = p_args[:1] if len(p_args) == 2 and p_args[1] is Ellipsis else p_args
    return all(compatible(a, e_args[0]) for a in elems)


def _subclass(p: Any, e: Any) -> bool:
    if not isinstance(p, type) or not isinstance(e, type):
        return True  # special forms we do not reason about
    if p in _NUMERIC_TOWER and e in _NUMERIC_TOWER[p]:
        return True
    try:
        return issubclass(p, e)
    except TypeError:
        return True  # e.g. a Protocol that is not runtime-checkable: undecidable, accept


def _is_tensor(tp: Any) -> bool:
    return (getattr(tp, "__module__", ""), getattr(tp, "__qualname__", "")) == ("torch", "Tensor")


def collated_fits(produced: Any, expected: Any) -> bool:
    """Whether collating values of type ``produced`` (torch's ``default_collate``) may give
    ``expected``: numbers, numpy arrays and tensors stack into a tensor; anything else
    collates into a list of the values, or a structure flowdata does not reason about."""
    p, e = _strip(produced), _strip(expected)
    if _is_tensor(e):
        numeric = p in (int, float, bool) or getattr(p, "__module__", "").startswith("numpy")
        return numeric or _is_tensor(p) or (not isinstance(p, type) and get_origin(p) is None)
    element = collection_element(e)
    if element is not None:
        return compatible(p, element)
    return not isinstance(p, type) or get_origin(p) is not None  # a structure: not compared


def collection_element(tp: Any) -> Any | None:
    """The element type when ``tp`` is a collection such as ``list[T]`` or ``Iterable[T]``."""
    tp = _strip(tp)
    origin = get_origin(tp)
    if origin in _ELEMENT_ORIGINS:
        args = get_args(tp)
        if origin is tuple:
            return args[0] if len(args) == 2 and args[1] is Ellipsis else None
        return args[0] if args else Any
    if tp in _ELEMENT_ORIGINS and tp is not tuple:
        return Any
    return None


def check_edges(graph: Graph, per_sample: Callable[[str], bool]) -> list[GraphProblem]:
    """Every edge whose produced type its consumer cannot accept, plus conflicting inputs.

    Args:
        graph: The graph.
        per_sample: Tells whether a node's value is per-sample (a source's items count):
            a per-sample value handed to a collection parameter is reported as a dangling
            group (FD201), not as a plain mismatch.
    """
    problems: list[GraphProblem] = []
    for name, node in graph.nodes.items():
        for p in node.params:
            producer = graph.nodes.get(p.name)
            if producer is None:
                continue
            if node.vectorized and not p.collect and per_sample(p.name):
                problems.extend(_vectorized_param(name, node, p, producer))
                continue
            if compatible(producer.type, p.type) or (p.batch and collated_fits(producer.type, p.type)):
                continue
            shown_expected = (f"Collect[{type_name(p.type)}]" if p.collect else
                              f"Batch[{type_name(p.type)}]" if p.batch else type_name(p.type))
            element = None if p.collect else collection_element(p.type)
            if element is not None and per_sample(p.name) and compatible(producer.type, element):
                problems.append(
                    GraphProblem(
                        code="FD201",
                        title="dangling-group",
                        message=(
                            f"'{name}' takes '{p.name}' as {type_name(p.type)}, but '{p.name}' is "
                            "one value per sample: without Collect the group never closes"
                        ),
                        node=name,
                        locations=(node.location, producer.location),
                        expected=f"{p.name}: Collect[{type_name(element)}]",
                        actual=f"{p.name}: {type_name(p.type)}",
                        fix=f"annotate the parameter as '{p.name}: Collect[{type_name(element)}]'",
                    )
                )
                continue
            if p.collect and not per_sample(p.name) and is_iterator(producer.type):
                continue  # a whole-valued generator that was meant as a source: FD202 says so, once
            produced = type_name(producer.type)
            problems.append(
                GraphProblem(
                    code="FD101",
                    title="type-mismatch",
                    message=(
                        f"'{name}' expects '{p.name}' as {shown_expected}, but node '{p.name}' "
                        f"{'yields items of' if producer.source else 'returns'} {produced}"
                    ),
                    node=name,
                    locations=(node.location, producer.location),
                    expected=type_name(p.type),
                    actual=produced,
                    fix=(
                        f"change the annotation of '{p.name}' in '{name}' or the return type of "
                        f"'{p.name}' so they agree"
                    ),
                )
            )
    problems.extend(_input_conflicts(graph))
    return problems


def _input_conflicts(graph: Graph) -> list[GraphProblem]:
    problems = []
    for spec in graph.inputs.values():
        if spec.name in BUILTINS:
            continue
        readers = spec.readers
        for (n1, p1), (n2, p2) in zip(readers, readers[1:]):
            if not (compatible(p1.type, p2.type) or compatible(p2.type, p1.type)):
                problems.append(
                    GraphProblem(
                        code="FD102",
                        title="input-conflict",
                        message=(
                            f"input '{spec.name}' is read as {type_name(p1.type)} by '{n1.name}' "
                            f"and as {type_name(p2.type)} by '{n2.name}'"
                        ),
                        node=n2.name,
                        locations=(n2.location, n1.location),
                        expected=type_name(p1.type),
                        actual=type_name(p2.type),
                        fix=f"give '{spec.name}' the same type in both functions",
                    )
                )
                break
    return problems


def _keeps_samples(name: str, node: Node) -> GraphProblem | None:
    """FD303: a reducer whose options keep the sample axis (``@reduce(Welford, dim=1)``).

    Checked when the reducer can be made from the ``@reduce`` options alone; options given
    by whole-valued parameters are checked when the pass starts.
    """
    spec = node.reducer
    assert spec is not None
    if getattr(spec.cls, "check_samples", None) is None:
        return None
    try:
        reducer = spec.make()
    except Exception:
        return None
    try:
        reducer.check_samples()
    except Exception as exc:
        text = str(exc).splitlines()
        fix = next((line.strip()[4:].strip() for line in text if line.strip().startswith("fix:")), "add axis 0 to dim")
        options = ", ".join(f"{k}={v!r}" for k, v in spec.options.items())
        return GraphProblem(
            code="FD303",
            title="reduce-keeps-samples",
            message=f"'{name}' is declared @reduce({spec.cls.__name__}, {options}), which keeps the sample axis",
            node=name,
            locations=(node.location,),
            expected="dim naming axes of the stacked batch of samples, axis 0 (the samples) included",
            actual=text[0].split(":")[0],
            fix=fix,
        )
    return None


def check_reductions(graph: Graph) -> list[GraphProblem]:
    """``@reduce`` nodes: exactly one Collect parameter, and a return type that accepts the
    reducer's result type."""
    from flowdata.reduce import result_type

    problems = []
    for name, node in graph.nodes.items():
        spec = node.reducer
        if spec is None:
            continue
        collects = node.collect_params
        if len(collects) != 1:
            problems.append(
                GraphProblem(
                    code="FD302",
                    title="reduce-needs-one-collect",
                    message=(
                        f"'{name}' is declared @reduce({spec.cls.__name__}) but has "
                        f"{len(collects)} Collect parameters"
                    ),
                    node=name,
                    locations=(node.location,),
                    expected="exactly one Collect[...] parameter (its values are folded)",
                    actual=", ".join(p.name for p in collects) or "none",
                    fix="give the reduction one Collect parameter; reduce other values in their own nodes",
                )
            )
        problem = _keeps_samples(name, node)
        if problem is not None:
            problems.append(problem)
        produced = result_type(spec.cls)
        if not compatible(produced, node.type):
            problems.append(
                GraphProblem(
                    code="FD301",
                    title="reducer-result-mismatch",
                    message=(
                        f"'{name}' returns {type_name(node.type)}, but its reducer "
                        f"{spec.cls.__name__}.result() gives {type_name(produced)}"
                    ),
                    node=name,
                    locations=(node.location,),
                    expected=type_name(node.type),
                    actual=type_name(produced),
                    fix=f"declare '-> {type_name(produced)}' on '{name}', or use a reducer that gives {type_name(node.type)}",
                )
            )
    return problems


# What a value declared as one of these may be at run time: any number of that kind, so
# that numpy's scalars (np.float32 for '-> float', np.int64 for '-> int') are accepted.
_NUMBER_KINDS: dict[type, type] = {int: numbers.Integral, float: numbers.Real, complex: numbers.Complex}


def contradicts(value: Any, declared: Any) -> bool:
    """Whether ``value`` certainly is not of type ``declared`` (the run-time check of a
    node's first value against its return annotation).

    Only what is certain counts: the value's class against the annotation's class (or its
    generic origin: ``list[int]`` checks ``list``, not the elements), the numeric tower
    read as ``numbers`` (an ``int`` or ``np.float32`` fits ``float``, a ``str`` fits no
    number), ``None`` against ``Optional``, every member of a union. ``Any``, type
    variables, unresolved names, protocols that are not runtime-checkable and other forms
    flowdata does not reason about never contradict.
    """
    try:
        check = _cached_checker(declared)
    except TypeError:  # an annotation that cannot be hashed (unhashable Annotated metadata)
        check = _checker(declared)
    return check is not None and not check(value)


@functools.lru_cache(maxsize=1024)
def _cached_checker(declared: Any) -> Callable[[Any], bool] | None:
    return _checker(declared)  # built once per type: the check of a value costs one call


def _checker(declared: Any) -> Callable[[Any], bool] | None:
    """A predicate that accepts every value of type ``declared`` (and maybe more), or
    None when nothing can be refused."""
    tp = _normalize_none(_strip(declared))
    if tp is Any or tp is object or isinstance(tp, (typing.TypeVar, str, typing.ForwardRef)):
        return None
    if _is_newtype(tp):
        return _checker(tp.__supertype__)
    if _is_union(tp):
        members = [_checker(m) for m in get_args(tp)]
        if any(m is None for m in members):
            return None
        return lambda v: any(m(v) for m in members)  # type: ignore[misc]
    if get_origin(tp) is Literal:
        kinds = tuple({type(a) for a in get_args(tp)})
        return _checker(typing.Union[kinds]) if kinds else None  # the literals' types, not their values
    cls = get_origin(tp) or tp
    if not isinstance(cls, type):
        return None
    if cls in _NUMBER_KINDS:
        kind = _NUMBER_KINDS[cls]
        return lambda v: isinstance(v, kind)
    if cls is bool:
        return lambda v: isinstance(v, bool) or type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_")
    try:
        isinstance(None, cls)  # a Protocol that is not runtime-checkable raises here
    except TypeError:
        return None
    return lambda v: isinstance(v, cls)
