"""Whether a plain Collect function can be handed its values as a lazy stream.

A ``Collect[T]`` parameter streams its values (O(1) memory in the number of samples, and
breaking out of the loop stops the upstream work) when the function's own code reads it
**once, to consume it on the spot**:

- as the iterable of a ``for`` loop, of a comprehension's first ``for``, or of ``yield from``;
- as an argument of a call, written by its name, that consumes an iterable there and then
  (``sum``, ``list``, ``tuple``, ``set``, ``frozenset``, ``sorted``, ``min``, ``max``,
  ``any``, ``all``, ``dict``, ``Counter``, ``deque``, ``np.fromiter``, ``"...".join``,
  ``math.fsum``), directly or through ``enumerate``, ``zip``, ``map``, ``filter``, ``iter``,
  ``islice`` or ``chain`` in such a place -- never ``np.sum``-like calls, which do not read
  generators, nor a method of an object, which could keep its argument;

and that place is not inside a loop, a nested function or a lambda (which could run it
again, or later), and the function is neither decorated (a wrapper may call it twice) nor
a generator (its body runs after the call). Anything else -- returning it, storing it, passing it to an arbitrary
function, concatenating it, reading it twice, a function whose source cannot be read --
gets a ``list`` of every value, as Hamilton does. A parameter annotated with Hamilton's
own ``hamilton.htypes.Collect`` always gets a ``list``.

The decision is a compile-time fact: it is made once per parameter when the graph is
built (:mod:`flowdata.discover` records it as ``Param.as_list``), from the function's
source, long before the function is called; it never changes a result, only the memory a
call needs.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["streamable"]

# Calls, by their full dotted name as written, that take any iterable and consume it before
# they return. Never numpy's or torch's reductions and constructors (``np.sum(gen)`` does not
# read a generator), never a method of an object that could keep its argument.
_CONSUMERS = frozenset({
    "str.join", "sum", "list", "tuple", "set", "frozenset", "sorted", "min", "max", "any", "all", "dict",
    "Counter", "collections.Counter", "deque", "collections.deque", "np.fromiter", "numpy.fromiter",
    "math.fsum", "fsum",
})
# Lazy wrappers that read their iterable once, where they are consumed.
_LAZY = frozenset({"enumerate", "zip", "map", "filter", "iter", "islice", "chain", "itertools.islice",
                   "itertools.chain"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
# Python 3.11 keeps the AST constructor's recursion count in state shared by all threads, so
# two ast.parse calls that overlap (Collect consumers decide in their own threads) can fail
# with "SystemError: AST constructor recursion depth mismatch": parses take turns.
_PARSING = threading.Lock()


def streamable(fn: Callable[..., Any] | None, param: str, *, source: bool = False) -> bool:
    """Whether ``fn`` consumes parameter ``param`` once, on the spot (see the module docstring).

    ``fn`` must be the function that is called, not a wrapper of it: a decorated function
    (one with ``__wrapped__``) may call its body twice or never, so it gets a list. A
    generator function runs after the call returns, so it gets a list too -- unless it is
    a ``source`` (whose Collect parameters stay open while its items are read).
    """
    if fn is None or hasattr(fn, "__wrapped__"):
        return False
    try:
        return _streamable(fn, param, source)
    except TypeError:  # unhashable callables: no cache, decide again
        return _decide(fn, param, source)


@functools.lru_cache(maxsize=1024)
def _streamable(fn: Callable[..., Any], param: str, source: bool) -> bool:
    return _decide(fn, param, source)


def _decide(fn: Callable[..., Any], param: str, source: bool) -> bool:
    try:
        text = textwrap.dedent(inspect.getsource(fn))
        with _PARSING:
            tree = ast.parse(text)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return False
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        return False
    func = defs[0]
    if param not in {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}:
        return False  # the callable's parameter is not the source's (a generated node)
    parents: dict[ast.AST, ast.AST] = {}
    uses: list[ast.Name] = []
    for node in ast.walk(func):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
        if isinstance(node, ast.Name) and node.id == param:
            uses.append(node)
    if not source and any(isinstance(n, (ast.Yield, ast.YieldFrom)) and _in_body(n, parents, func)
                          for n in ast.walk(func)):
        return False  # a generator: its body runs after the call, when the stream is gone
    if not uses:
        return True
    if len(uses) > 1 or not isinstance(uses[0].ctx, ast.Load):
        return False
    return _consumed_once(uses[0], parents, func)


def _consumed_once(use: ast.AST, parents: dict[ast.AST, ast.AST], func: ast.AST) -> bool:
    node = use
    while True:
        parent = parents.get(node)
        if parent is None:
            return False
        if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is node:
            return _not_repeated(parent, parents, func)
        if isinstance(parent, ast.comprehension) and parent.iter is node:
            comp = parents[parent]
            if comp.generators[0] is not parent:  # type: ignore[attr-defined]
                return False  # an inner 'for' runs once per outer element
            if isinstance(comp, ast.GeneratorExp):
                node = comp  # lazy: consumed only where the generator is
                continue
            return _not_repeated(comp, parents, func)
        if isinstance(parent, ast.YieldFrom):
            return _not_repeated(parent, parents, func)
        if isinstance(parent, ast.Call) and node in parent.args:
            name = _call_name(parent.func)
            if name in _CONSUMERS:
                return _not_repeated(parent, parents, func)
            if name in _LAZY:
                node = parent
                continue
        return False


def _not_repeated(node: ast.AST, parents: dict[ast.AST, ast.AST], func: ast.AST) -> bool:
    """True when ``node`` runs at most once per call: not in a loop body or a nested scope."""
    child, parent = node, parents.get(node)
    while parent is not None and parent is not func:
        if isinstance(parent, _SCOPES):
            return False
        if isinstance(parent, _LOOPS) and child is not getattr(parent, "iter", None):
            return False
        if isinstance(parent, ast.comprehension) or isinstance(parent, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return False
        child, parent = parent, parents.get(parent)
    return parent is func


def _in_body(node: ast.AST, parents: dict[ast.AST, ast.AST], func: ast.AST) -> bool:
    """Whether ``node`` belongs to ``func`` itself, not to a function nested in it."""
    parent = parents.get(node)
    while parent is not None and parent is not func:
        if isinstance(parent, _SCOPES):
            return False
        parent = parents.get(parent)
    return parent is func


def _call_name(func: ast.AST) -> str:
    """``sum``, ``np.fromiter``, ``"".join``: the dotted name a call is written with."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        if func.attr == "join" and isinstance(func.value, ast.Constant) and isinstance(func.value.value, str):
            return "str.join"
        inner = _call_name(func.value) if isinstance(func.value, (ast.Name, ast.Attribute)) else ""
        return f"{inner}.{func.attr}" if inner else ""
    return ""
