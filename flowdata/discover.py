"""Modules -> frozen nodes, through Hamilton's graph builder when a module uses it.

This is the only module that imports Hamilton, and only when the modules need it: when no
module imported Hamilton (so no function can carry a Hamilton modifier or marker), the
public functions become nodes directly, as Hamilton's default resolver would make them,
and building never pays for importing Hamilton (and pandas through it). Otherwise Hamilton
finds the public functions of a module and applies its function modifiers (``@parameterize``, ``@extract_fields``,
``@config.when``, ``@tag``, ``@check_output``, ``@pipe``, ...); each resulting Hamilton
node becomes a :class:`flowdata.node.Node`. Hamilton's edge building and type checks are not
used: flowdata checks edges itself and reports every problem at once.

Hamilton's ``Parallelizable[T]`` and ``Collect[T]`` are translated to flowdata's markers,
so Hamilton modules run unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any, get_args, get_origin

from flowdata.errors import GraphProblem, describe
from flowdata.node import NO_DEFAULT, Node, Param
from flowdata.reduce import reduce_spec
from flowdata.typecheck import collection_element
from flowdata.types import MarkerKind, read_marker, type_name
from flowdata.usage import streamable
from flowdata.columns import form_of
from flowdata.vectorize import is_vectorized

__all__ = ["Program", "discover", "function_location", "import_file", "load_program", "program_of"]


def _uses_hamilton() -> bool:
    """Whether Hamilton must resolve the modules' functions: it is imported (a module that
    uses a Hamilton modifier or marker imported it), or ``FLOWDATA_HAMILTON=1`` asks."""
    return "hamilton" in sys.modules or os.environ.get("FLOWDATA_HAMILTON") == "1"


def _public_functions(module: ModuleType) -> list[tuple[str, Callable[..., Any]]]:
    """The functions Hamilton's ``find_functions`` finds: public, defined in the module (or
    a submodule of it), in name order.

    Public means both names: the function's own and the module attribute that holds it,
    so ``_square = lambda v: v * v`` (a function named ``<lambda>``) is a private helper too.
    """
    def defined_here(fn: Any) -> bool:
        if not inspect.isfunction(fn) or fn.__name__.startswith("_"):
            return False
        home = inspect.getmodule(fn)
        return home is not None and (home.__name__ == module.__name__ or home.__name__.startswith(module.__name__ + "."))

    return [(name, fn) for name, fn in inspect.getmembers(module, predicate=defined_here) if not name.startswith("_")]


@dataclass(frozen=True)
class _PlainNode:
    """What Hamilton's default resolver makes of a function without modifiers (the fields
    :func:`_to_node` reads)."""

    name: str
    type: Any
    input_types: Mapping[str, tuple[Any, Any]]
    default_parameter_values: Mapping[str, Any]
    callable: Callable[..., Any]
    originating_functions: tuple[Callable[..., Any], ...]
    tags: Mapping[str, Any]
    documentation: str


def _plain_nodes(fn: Callable[..., Any]) -> list[_PlainNode]:
    hints = typing.get_type_hints(fn, include_extras=True)
    params = inspect.signature(fn).parameters
    module = inspect.getmodule(fn)
    return [_PlainNode(
        name=fn.__name__,
        type=hints["return"],
        input_types={k: (hints[k], None) for k in params},
        default_parameter_values={k: p.default for k, p in params.items() if p.default is not p.empty},
        callable=fn,
        originating_functions=(fn,),
        tags={"module": module.__name__ if module is not None else ""},
        documentation=fn.__doc__ or "",
    )]


def discover(
    modules: Iterable[ModuleType], config: Mapping[str, Any], module_overrides: bool = False
) -> tuple[tuple[Node, ...], tuple[GraphProblem, ...]]:
    """Finds the nodes of ``modules`` under ``config``.

    With ``module_overrides`` (``Builder().allow_module_overrides()``), a node defined again
    in a later module replaces the earlier one (Hamilton's rule) instead of being FD004;
    twice in one module is FD004 still.

    Returns:
        The nodes in a stable order, and the problems found while reading them (missing
        annotations, misused markers, duplicate names, modifiers that failed).
    """
    hamilton = _uses_hamilton()
    nodes: dict[str, Node] = {}
    problems: list[GraphProblem] = []
    for module in modules:
        for attr, fn in _public_functions(module):
            lam = _lambda_node(attr, fn)
            if lam is not None:
                problems.append(lam)
                continue
            hnodes: Any = None
            if hamilton:
                # Hamilton's resolvers first: a function they remove (@hamilton_exclude, an
                # unchosen @config.when) is not a node, and needs no annotations.
                try:
                    with _quiet_hamilton():
                        hnodes = _resolve(fn, dict(config))
                except Exception as exc:  # any modifier failure becomes a reported problem
                    problems.append(_missing_annotations(fn) or _modifier_problem(fn, exc))
                    continue
                if not hnodes:
                    continue
            missing = _missing_annotations(fn) or _unsupported(fn)
            if missing:
                problems.append(missing)
                continue
            if not hamilton:
                hnodes = _plain_nodes(fn)
            for hn in hnodes:
                if hn.name in config:
                    continue  # config values override nodes, as in Hamilton
                node, node_problems = _to_node(hn, fn)
                problems.extend(node_problems)
                if node.name in nodes and module_overrides and nodes[node.name].module != node.module:
                    del nodes[node.name]  # the later module's node replaces it (kept in its order)
                if node.name in nodes:
                    first = nodes[node.name]
                    problems.append(
                        GraphProblem(
                            code="FD004",
                            title="duplicate-node",
                            message=f"node '{node.name}' is defined twice",
                            node=node.name,
                            locations=(node.location, first.location),
                            fix="rename one of the functions, or pass only one of the modules",
                        )
                    )
                    continue
                nodes[node.name] = node
    return tuple(nodes.values()), tuple(problems)


def _fn_problem(fn: Callable[..., Any], code: str, title: str, message: str, fix: str, **more: str) -> GraphProblem:
    """A problem of one function, located at its ``file:line``."""
    file, line = function_location(fn)
    return GraphProblem(code=code, title=title, message=message, node=fn.__name__, locations=(f"{file}:{line}",),
                        fix=fix, **more)


def _modifier_problem(fn: Callable[..., Any], exc: Exception) -> GraphProblem:
    fix = "check the decorator's arguments against Hamilton's documentation"
    if isinstance(exc, KeyError) and exc.args:
        # Modifiers read config keys; a missing key surfaces as a bare KeyError.
        fix = f"the decorator reads config key {exc.args[0]!r}: set it with .with_config({{{exc.args[0]!r}: ...}})"
    return _fn_problem(fn, "FD002", "modifier-error", f"function '{fn.__name__}' could not be expanded: {describe(exc)}",
                       fix)


def _resolve(fn: Callable[..., Any], config: dict[str, Any]) -> Any:
    from hamilton.function_modifiers import base as fm_base

    return fm_base.resolve_nodes(fn, config)


@contextmanager
def _quiet_hamilton() -> Any:
    """Hamilton logs a stack trace before re-raising modifier errors; we report them ourselves."""
    import logging  # only with Hamilton's resolvers (which import it anyway): a plain build stays light

    log = logging.getLogger("hamilton.function_modifiers.base")
    old = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(old)


def function_location(fn: Callable[..., Any]) -> tuple[str, int]:
    """(file, line) of a function, the file relative to the working directory when inside it."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    try:
        file = inspect.getsourcefile(fn) or (code.co_filename if code else "<unknown>")
    except TypeError:
        file = "<unknown>"
    line = code.co_firstlineno if code else 0
    try:
        rel = os.path.relpath(file)
        if not rel.startswith(".."):
            file = rel
    except ValueError:
        pass
    return file, line


def _lambda_node(attr: str, fn: Callable[..., Any]) -> GraphProblem | None:
    """FD001 for a public module attribute holding a lambda, named by the attribute (a
    lambda's own name, ``<lambda>``, says nothing, and a lambda cannot be annotated)."""
    if fn.__name__ != "<lambda>":
        return None
    file, line = function_location(fn)
    sig = inspect.signature(fn)
    return GraphProblem(
        code="FD001", title="missing-annotation",
        message=f"'{attr}' is a lambda, which cannot be annotated, so it cannot be a node",
        node=attr, locations=(f"{file}:{line}",),
        expected="a def with every parameter and the return value annotated", actual=f"{attr} = lambda {str(sig)[1:-1]}: ...",
        fix=f"write it as 'def {attr}(...) -> ...:' with types, or name it '_{attr}' if it is a helper, not a node",
    )


def _missing_annotations(fn: Callable[..., Any]) -> GraphProblem | None:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # e.g. a forward reference that does not resolve
        return _fn_problem(fn, "FD001", "missing-annotation",
                           f"the annotations of '{fn.__name__}' cannot be read: {describe(exc)}",
                           "import every name used in the annotations at module level")
    sig = inspect.signature(fn)
    lacking = [
        p.name
        for p in sig.parameters.values()
        if p.name not in hints and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    no_return = "return" not in hints
    if not lacking and not no_return:
        return None
    what = [f"parameter '{n}'" for n in lacking] + (["the return value"] if no_return else [])
    return _fn_problem(fn, "FD001", "missing-annotation", f"function '{fn.__name__}' has no type for {', '.join(what)}",
                       "annotate it, e.g. 'def f(x: int) -> float'",
                       expected="every parameter and the return value annotated", actual=f"{fn.__name__}{sig}")


def _unsupported(fn: Callable[..., Any]) -> GraphProblem | None:
    """FD006 for ``async def`` nodes and FD007 for ``*args``/``**kwargs``: neither can be a node."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return _fn_problem(
            fn, "FD006", "async-node",
            f"function '{fn.__name__}' is an async def: flowdata calls nodes synchronously, "
            "so it would hand back an un-awaited coroutine",
            "make it a plain def; for concurrent I/O, run the requests inside it (asyncio.run(...)) "
            "or let executor='processes' run samples in parallel",
            expected="a plain def", actual=f"async def {fn.__name__}",
        )
    sig = inspect.signature(fn)
    variadic = [p for p in sig.parameters.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if variadic:
        shown = ", ".join(("*" if p.kind is p.VAR_POSITIONAL else "**") + p.name for p in variadic)
        return _fn_problem(
            fn, "FD007", "variadic-parameters",
            f"function '{fn.__name__}' takes {shown}: a node's parameters name the nodes it reads",
            "name each value it reads as a parameter, or make it a private helper (a leading '_')",
            expected="named parameters only", actual=f"{fn.__name__}{sig}",
        )
    return None


def _hamilton_marker(tp: Any) -> tuple[MarkerKind | None, Any]:
    """Reads Hamilton's ``Parallelizable[T]`` / ``Collect[T]`` as flowdata markers."""
    from hamilton import htypes

    origin = get_origin(tp)
    if origin is htypes.Parallelizable:
        args = get_args(tp)
        return "parallel", (args[0] if args else Any)
    if origin is htypes.Collect:
        args = get_args(tp)
        return "collect", (args[0] if args else Any)
    return None, tp


def _read(tp: Any) -> tuple[MarkerKind | None, Any]:
    kind, inner = read_marker(tp)
    if kind is None and "hamilton" in sys.modules:  # Hamilton's markers exist only once it is imported
        return _hamilton_marker(tp)
    return kind, inner


def _is_hamilton_collect(tp: Any) -> bool:
    if "hamilton" not in sys.modules:
        return False
    from hamilton import htypes

    return get_origin(tp) is htypes.Collect


def _to_node(hn: Any, fn: Callable[..., Any]) -> tuple[Node, list[GraphProblem]]:
    origin = (hn.originating_functions or (fn,))[0]
    file, line = function_location(origin)
    problems: list[GraphProblem] = []
    kind, item_type = _read(hn.type)
    if kind == "collect":
        problems.append(_misplaced(hn.name, f"{file}:{line}", "Collect[...] as a return type"))
        kind, item_type = None, hn.type
    batch = kind == "batch"
    if batch:
        kind = None
    vectorized = is_vectorized(origin)
    returned = form_of(item_type) if vectorized else ""
    if returned in ("record_batch", "table"):
        item_type = dict[str, Any]  # a row of the returned record batch or table
    elif returned in ("arrow_array", "chunked_array"):
        item_type = Any  # an Arrow array's values, as Python values
    elif vectorized and kind is None and not batch and not returned:
        element = collection_element(item_type)
        if element is None:
            problems.append(_vectorized_return(hn.name, f"{file}:{line}", item_type))
        item_type = Any if element is None else element
    params = []
    defaults = hn.default_parameter_values or {}
    called = hn.callable if hn.callable is origin else None  # a generated callable: lists
    for pname, (ptype, _dep) in hn.input_types.items():
        pkind, inner = _read(ptype)
        if pkind in ("parallel", "sequential"):
            problems.append(
                _misplaced(hn.name, f"{file}:{line}", f"{pkind.capitalize()}[...] on parameter '{pname}'")
            )
            pkind, inner = None, Any  # reported once, here; no follow-on type errors
        params.append(
            Param(
                name=pname,
                type=inner,
                collect=pkind == "collect",
                default=defaults.get(pname, NO_DEFAULT),
                # Decided here, once: whether the function reads this Collect parameter as
                # a stream (flowdata.usage) -- a fact of its code, not of a run.
                as_list=pkind == "collect" and (_is_hamilton_collect(ptype) or not streamable(
                    called, pname, source=kind is not None)),
                batch=pkind == "batch",
                form=form_of(inner) if vectorized and pkind is None else "",
            )
        )
    callable_ = hn.callable
    node = Node(
        name=hn.name,
        type=item_type,
        source=kind,
        params=tuple(params),
        fn=callable_,
        module=getattr(inspect.getmodule(origin), "__name__", ""),
        function=getattr(origin, "__qualname__", hn.name),
        file=file,
        line=line,
        tags=MappingProxyType(dict(hn.tags)),
        doc=hn.documentation,
        positional_call=_positional(callable_, [p.name for p in params]),
        reducer=reduce_spec(origin),
        origin=origin,
        vectorized=vectorized,
        batch=batch,
    )
    return node, problems


def _vectorized_return(node: str, location: str, declared: Any) -> GraphProblem:
    return GraphProblem(
        code="FD008",
        title="vectorized-return",
        message=(f"'{node}' is @vectorized, so it returns one value per sample of a chunk, "
                 f"but its return is declared as {type_name(declared)}"),
        node=node,
        locations=(location,),
        expected=("a list or Sequence of the per-sample type (e.g. '-> list[int]'), a tensor or array, "
                  "or an Arrow record batch, table or array"),
        actual=f"-> {type_name(declared)}",
        fix=f"declare '-> list[{type_name(declared)}]' (the values of the chunk's samples, in order)",
    )


def _positional(fn: Callable[..., Any], names: list[str]) -> bool:
    """True when ``fn`` takes exactly ``names``, in order, by position (a plain function)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    ps = list(sig.parameters.values())
    return [p.name for p in ps] == names and all(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps
    )


def _misplaced(node: str, location: str, what: str) -> GraphProblem:
    return GraphProblem(
        code="FD003",
        title="misplaced-marker",
        message=f"node '{node}' uses {what}",
        node=node,
        locations=(location,),
        expected="Parallel/Sequential only as return types, Collect only on parameters "
                 "(Batch on parameters and returns)",
        actual=what,
        fix="return Parallel[T] or Sequential[T] from a source; take Collect[T] as a parameter",
    )


@dataclass(frozen=True)
class Program:
    """How to rebuild a graph's nodes in another process: module references and config.

    Attributes:
        modules: ``(module name, file)`` pairs; the file is used when the name does not
            import (a module loaded from a path).
        config: The configuration the graph was built with.
    """

    modules: tuple[tuple[str, str | None], ...]
    config: Mapping[str, Any]
    module_overrides: bool = False


def program_of(modules: Iterable[ModuleType], config: Mapping[str, Any], module_overrides: bool = False) -> Program:
    """The :class:`Program` that rebuilds ``modules`` under ``config``."""
    return Program(
        modules=tuple((m.__name__, getattr(m, "__file__", None)) for m in modules),
        config=dict(config),
        module_overrides=module_overrides,
    )


def _import(name: str, file: str | None) -> ModuleType:
    if name == "__main__":
        # Under spawn the parent's main module is imported as __mp_main__.
        main = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
        if main is not None:
            return main
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        if file is None:
            raise
    return import_file(name, file)


def import_file(name: str, path: str) -> ModuleType:
    """Imports the ``.py`` file at ``path`` as module ``name`` (registered in sys.modules).

    As ``python path`` would, the file's folder goes first on ``sys.path`` (unless it is on
    it already), so that the module imports its siblings (``from helpers import clean``),
    in the ``flowdata`` command, in ``Builder().with_modules("path.py")`` and in worker
    processes alike.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in (os.path.abspath(p or os.curdir) for p in sys.path):
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load module {name!r} from {path!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_program(program: Program) -> dict[str, Node]:
    """Imports the program's modules and discovers their nodes (in a worker process)."""
    modules = [_import(name, file) for name, file in program.modules]
    nodes, _ = discover(modules, program.config, program.module_overrides)
    return {n.name: n for n in nodes}
