"""What a cache key covers for code: a function and everything it reaches.

:func:`code_key` digests a function's source text and, following the global names its code
reads (in nested functions, comprehensions and lambdas too):

- **module-level objects** it reads, by their state (:func:`flowdata.run.caching.digest.digest`):
  numbers, strings, enums, tuples, arrays and tensors by value; torch modules by their
  parameters, buffers and settings (weights loaded into a module-level encoder change the
  key); instances and dataclasses through their attributes. A module-level ``list``,
  ``dict`` or ``set`` (any mutable container, a ``threading.local`` too) is keyed by its
  type only: its contents may change as the program runs (a counter, a log, a memo); make
  a lookup table a tuple, or give it as an input or config, for its contents to count;
- **functions and classes of the user's own modules** it calls or uses, transitively
  (their source text, and what *they* reach), ``functools`` wrappers (``lru_cache``,
  ``wraps``) through ``__wrapped__``, bound methods with their object's state, and its
  closure cells;
- **modules** it reads attributes of: a user module's attributes that the code names are
  followed as above; a module installed in site-packages (or the standard library) is
  keyed by its package's **version**, never read;
- functions and classes from installed packages (``np.mean``, ``torch.nn.Linear``) by
  their package version alone (an *instance* of one, by its state).

A *user module* is one whose file lies outside the interpreter's installation (the
standard library and site-packages). What the key cannot see: code reached through
``getattr`` with a computed name, ``eval``/``exec``, and a data file rewritten with the
same size and modification time. An object whose state cannot be read at all -- an open
file, a lock, a connection, a compiled function of the user's own -- raises
:class:`~flowdata.run.caching.digest.Unseen` naming it and the function that reaches it.

:func:`file_stats` finds every string, anywhere in a value (nested lists, tuples and dicts
included), that names an existing file, with its size and modification time.
"""

from __future__ import annotations

import collections
import collections.abc
import functools
import hashlib
import inspect
import os
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

from flowdata.run.caching.digest import Unseen, digest_with, is_code, reading
from flowdata.run.caching.installed import is_user_module, package_version

__all__ = ["code_key", "digest", "file_stats", "is_user_module", "package_version"]

_CONSTANT = (bool, int, float, complex, str, bytes, type(None))
# Mutable containers at module level, per-thread stores included: keyed by their type (see reached()).
_MUTABLE = (list, dict, set, bytearray, collections.deque, collections.abc.MutableMapping,
            collections.abc.MutableSequence, collections.abc.MutableSet, threading.local)


def code_key(fn: Any) -> str:
    """A SHA-256 of ``fn``'s code and of everything it reaches (see the module docstring).

    Raises:
        flowdata.run.caching.digest.Unseen: it reaches an object whose state cannot be read (an open
            file, a lock, a compiled function of the user's own), named with where it is.
    """
    with reading() as ctx:
        known = ctx.codes.get(id(fn))
        if known is not None and known[0] is fn:  # one digest in progress reads a class once
            return known[1]
        h = hashlib.sha256()
        _Walker(h).visit(fn)
        key = ctx.codes[id(fn)] = (fn, h.hexdigest())
    return key[1]


def digest(value: Any) -> str:
    """A stable SHA-256 of ``value`` by content (:func:`flowdata.run.caching.digest.digest_with`), the
    functions and classes in it by :func:`code_key`.

    Raises:
        flowdata.run.caching.digest.Unseen: ``value`` holds an object whose state cannot be read.
    """
    return digest_with(value, code_key)


class _Walker:
    def __init__(self, h: Any):
        self.h = h
        self.seen: set[int] = set()

    def put(self, text: str) -> None:
        self.h.update(text.encode() + b";")

    def visit(self, obj: Any) -> None:
        if id(obj) in self.seen:
            self.put("seen")
            return
        self.seen.add(id(obj))
        fn = inspect.unwrap(obj) if callable(obj) else obj
        if isinstance(fn, functools.partial):
            self.put("partial")
            self.visit(fn.func)
            self.value(list(fn.args))
            self.value(dict(fn.keywords))
        elif inspect.ismethod(fn):
            self.visit(fn.__func__)
            if not isinstance(fn.__self__, (type, types.ModuleType)):
                self.value(fn.__self__, ".__self__")  # a bound method: its object's state too
        elif inspect.isfunction(fn):
            self.function(fn)
        elif isinstance(fn, type):
            self.cls(fn)
        elif isinstance(fn, types.ModuleType):
            self.put(f"module:{fn.__name__}:{package_version(fn.__name__) if not is_user_module(fn) else 'user'}")
        else:
            self.value(fn)

    def function(self, fn: types.FunctionType) -> None:
        module = sys.modules.get(fn.__module__)
        if not is_user_module(module):
            self.put(f"library:{fn.__module__}.{fn.__qualname__}:{package_version(fn.__module__)}")
            return
        try:
            self.put("source:" + inspect.getsource(fn))
        except (OSError, TypeError):
            self.put(f"code:{fn.__qualname__}")
        # Its bytecode and constants too: two lambdas on one line share their source text.
        self.h.update(fn.__code__.co_code)
        self.put(repr([c for c in fn.__code__.co_consts if isinstance(c, _CONSTANT)]))
        try:
            for cell, free in zip(fn.__closure__ or (), fn.__code__.co_freevars, strict=False):
                try:
                    contents = cell.cell_contents
                except ValueError:  # an empty cell
                    self.put("empty-cell")
                    continue
                self.reached(contents, where=free)
            if fn.__defaults__:
                self.value(list(fn.__defaults__), "(defaults)")
            for name in sorted(_global_names(fn.__code__)):
                if name in fn.__globals__:
                    self.put(f"global:{name}")
                    self.reached(fn.__globals__[name], attrs=_attribute_names(fn.__code__),
                                 where=f"{fn.__module__}.{name}")
                # a builtin, or a name defined later: the source text already covers it
        except Unseen as exc:
            if not exc.reader:  # the innermost function whose code reaches it
                code = fn.__code__
                exc.reader = f"{fn.__qualname__} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
            raise

    def cls(self, cls: type) -> None:
        module = sys.modules.get(cls.__module__)
        if not is_user_module(module):
            self.put(f"library-class:{cls.__module__}.{cls.__qualname__}:{package_version(cls.__module__)}")
            return
        try:
            self.put("class:" + inspect.getsource(cls))
        except (OSError, TypeError):
            self.put(f"class:{cls.__module__}.{cls.__qualname__}")
        for attr in sorted(vars(cls)):
            member = vars(cls)[attr]
            target = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if inspect.isfunction(target):
                self.visit(target)
        for base in cls.__mro__[1:]:
            if base is not object:
                self.visit(base)

    def reached(self, value: Any, attrs: frozenset[str] = frozenset(), where: str = "") -> None:
        """A global (or closure cell) the code reads: followed if it is code or a user
        module; a mutable container by its type; anything else by its state."""
        if isinstance(value, types.ModuleType):
            self.visit(value)
            if is_user_module(value):
                for name in sorted(attrs):
                    if name in vars(value):
                        self.put(f"attr:{value.__name__}.{name}")
                        self.reached(vars(value)[name], where=f"{value.__name__}.{name}")
        elif is_code(value):
            self.visit(value)
        elif isinstance(value, _MUTABLE):
            # A list, dict or set at module level: its contents may change as the program
            # runs (a counter, a log, a memo), so only its type is part of the key.
            self.put(f"object:{type(value).__module__}.{type(value).__qualname__}")
        else:  # constants, arrays, tensors, torch modules, instances: by their state
            self.value(value, where)

    def value(self, value: Any, where: str = "") -> None:
        try:
            self.put("value:" + digest(value))
        except Unseen as exc:
            raise exc.inside(where) from None


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _attribute_names(code: types.CodeType) -> frozenset[str]:
    return frozenset(_global_names(code))


def file_stats(value: Any, limit: int = 100_000) -> list[tuple[str, int, int]]:
    """``(path, size, mtime_ns)`` of every existing file named by a string in ``value``."""
    out: list[tuple[str, int, int]] = []
    for text in _strings(value, limit):
        if len(text) < 4096 and "\0" not in text:
            try:
                st = os.stat(text)
            except (OSError, ValueError):
                continue
            if os.path.isfile(text):
                out.append((text, st.st_size, st.st_mtime_ns))
    return out


def _strings(value: Any, limit: int) -> Iterator[str]:
    stack = [value]
    n = 0
    while stack and n < limit:
        v = stack.pop()
        n += 1
        if isinstance(v, str):
            yield v
        elif isinstance(v, os.PathLike):
            p = os.fspath(v)
            if isinstance(p, str):
                yield p
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
