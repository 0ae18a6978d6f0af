"""State digests: a stable SHA-256 of a value, by everything it holds.

:func:`digest` reads a value the way a cache key must -- by content, never by identity:

- numbers, strings, bytes, ``None``, enums (their class and value);
- lists, tuples (a namedtuple with its class), dicts and other mappings (a
  ``mappingproxy`` too) and sets, element by element (mappings and sets in an order of
  their own, so that hash randomisation never changes a key);
- numpy arrays and scalars by dtype (structured ones field by field), shape and bytes;
  arrays of Python objects element by element;
- torch tensors by dtype, shape, layout and values (conjugate and negative views resolved,
  sparse ones by their indices and values); torch modules by each submodule's class,
  settings, parameters and buffers;
- functions, classes and ``functools`` wrappers by their code and everything it reaches
  (the ``code_key`` given, :func:`flowdata.run.caching.fingerprint.code_key` by
  :func:`flowdata.run.caching.fingerprint.digest`; a wrapper through ``__wrapped__``). The two keys
  call each other -- code reaches constants, a value holds functions -- so the code key
  is handed to this module, which imports nothing of flowdata's;
- dataclasses (such as ``Stats`` and ``Vocab``) field by field, and any other object
  through what pickling would save of it -- its attributes (its ``__getstate__``) and what
  rebuilds it -- read, never pickled, so that it is keyed by the same state that makes it.

What has no readable state -- an open file, a lock, a connection, a generator, a compiled
function of the user's own -- raises :class:`Unseen`, naming where in the value it was
found: a key that cannot see an object's state could go stale when it changes, so callers
refuse to cache (``cache=``) or warn and recompute (the pass cache) instead.
"""

from __future__ import annotations

import copyreg
import pickle
import dataclasses
import enum
import functools
import hashlib
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from flowdata.run.caching.installed import is_user_module, package_version
from flowdata.run.sources import huggingface

__all__ = ["Unseen", "class_key", "digest_with", "is_code", "reading"]

_PLAIN = (bool, int, float, complex, str)


class Unseen(Exception):
    """A value whose state a key cannot read.

    Attributes:
        what: What it is and why it cannot be read (``a _io.TextIOWrapper: cannot pickle ...``).
        where: Where it was found, outermost first (``ENCODER._log``); filled in as the
            error leaves each container.
        reader: The function whose code reaches it (``word_id (text.py:12)``), when one does.
    """

    def __init__(self, what: str, where: str = "", reader: str = ""):
        super().__init__(what)
        self.what, self.where, self.reader = what, where, reader

    def inside(self, outer: str) -> Unseen:
        """This error, found inside ``outer`` (a name, ``.attr`` or ``[i]``)."""
        self.where = outer + self.where
        return self

    def __str__(self) -> str:
        at = f"{self.where} " if self.where else ""
        by = f", which {self.reader} reads" if self.reader else ""
        return f"{at}({self.what}){by}"


class _Context(threading.local):
    """What one digest (or code key) in progress has seen: objects being read (a cycle
    meets one again), code keys already made (a list of 10,000 instances of one class
    reads the class's source once) and digests of big arrays (a model's weights reached by
    several nodes are hashed once while a loader is built)."""

    def __init__(self) -> None:
        self.depth = 0
        self.active: set[int] = set()
        self.codes: dict[int, tuple[Any, str]] = {}
        self.big: dict[int, tuple[Any, str]] = {}
        self.code: Callable[[Any], str] | None = None  # the code key of the outermost digest


_CTX = _Context()


@contextmanager
def reading(code: Callable[[Any], str] | None = None) -> Iterator[_Context]:
    """The context of the outermost digest or code key in progress (made, then forgotten);
    ``code`` keys the functions met in values, unless an outer digest gave one already."""
    ctx = _CTX
    if ctx.code is None:
        ctx.code = code
    ctx.depth += 1
    try:
        yield ctx
    finally:
        ctx.depth -= 1
        if ctx.depth == 0:
            ctx.active.clear()
            ctx.codes.clear()
            ctx.big.clear()
            ctx.code = None


def digest_with(value: Any, code_key: Callable[[Any], str]) -> str:
    """A stable SHA-256 of ``value`` by content (see the module docstring), the functions
    and classes in it keyed by ``code_key``.

    Raises:
        Unseen: ``value`` holds an object whose state cannot be read.
    """
    h = hashlib.sha256()
    with reading(code_key):
        _feed(h, value)
    return h.hexdigest()


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _child(h: Any, value: Any, where: str) -> None:
    try:
        _feed(h, value)
    except Unseen as exc:
        raise exc.inside(where) from None


def _feed(h: Any, value: Any) -> None:
    t = type(value)
    if value is None or t in _PLAIN:
        h.update(f"{t.__name__}:{value!r};".encode())
    elif t is bytes or t is bytearray:
        h.update(f"{t.__name__}:{len(value)}:".encode() + value)
    elif isinstance(value, enum.Enum):
        h.update(f"enum:{_name(t)}:".encode())
        _child(h, value.value, ".value")
    elif _numpy_value(value):
        _feed_big(h, value, _feed_array)
    elif _torch_value(value, "Tensor"):
        _feed_big(h, value, _feed_tensor)
    elif _torch_value(value, "nn", "Module"):
        _once(h, value, _feed_module)
    elif huggingface.is_datasets_object(value):
        _feed_hf(h, value)
    elif is_code(value):
        code = _CTX.code
        if code is None:  # digest_with() and the code key itself always give one
            raise RuntimeError("flowdata.run.caching.digest: a function met outside digest_with()/a code key")
        h.update(f"code:{code(value)};".encode())
    else:
        _once(h, value, _feed_object)


def _once(h: Any, value: Any, feed: Any) -> None:
    """Feeds a value that may hold itself: met again while it is being read, it is a cycle."""
    active = _CTX.active
    if id(value) in active:
        h.update(b"cycle;")
        return
    active.add(id(value))
    try:
        feed(h, value)
    finally:
        active.discard(id(value))


def _feed_object(h: Any, value: Any) -> None:
    t = type(value)
    if isinstance(value, (list, tuple)):
        kind = t.__name__ if t in (list, tuple) else _name(t)
        h.update(f"{kind}[{len(value)}](".encode())
        for i, v in enumerate(value):
            _child(h, v, f"[{i}]")
        h.update(b")")
    elif isinstance(value, Mapping):
        kind = "dict" if t is dict else _name(t)
        h.update(f"{kind}[{len(value)}](".encode())
        for key_digest, k in sorted((_sub_digest(k, "[key]"), k) for k in value):
            h.update(key_digest.encode())
            _child(h, value[k], f"[{k!r}]")
        h.update(b")")
    elif isinstance(value, weakref.ref):  # what it refers to (an LSTM keeps its weights so)
        target = value()
        h.update(b"weakref(")
        _child(h, target, "()")
        h.update(b")")
    elif isinstance(value, (set, frozenset)):
        h.update(f"{t.__name__ if t in (set, frozenset) else _name(t)}[{len(value)}](".encode())
        for d in sorted(_sub_digest(v, "{...}") for v in value):
            h.update(d.encode())
        h.update(b")")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(f"dataclass:{_name(t)}(".encode())
        for f in dataclasses.fields(value):
            _feed(h, f.name)
            _child(h, getattr(value, f.name), f".{f.name}")
        h.update(b")")
    else:
        _feed_reduced(h, value)


def _sub_digest(value: Any, where: str) -> str:
    h = hashlib.sha256()
    _child(h, value, where)
    return h.hexdigest()


def _feed_reduced(h: Any, value: Any) -> None:
    """Any other object by what pickling would save of it (read, not pickled): what
    rebuilds it and its state -- its attributes, or what its ``__getstate__`` gives."""
    t = type(value)
    try:
        reducer = copyreg.dispatch_table.get(t)
        rv = reducer(value) if reducer is not None else value.__reduce_ex__(4)
    except Exception as exc:  # an open file, a lock, a C object: nothing of its state can be read
        why = "" if str(exc).startswith("cannot pickle") else f": {type(exc).__name__}: {exc}"
        raise Unseen(f"a {_name(t)}, whose state cannot be read{why}") from None
    if isinstance(rv, str):  # a named global: a builtin function, a ufunc, a singleton
        module = getattr(value, "__module__", None) or t.__module__
        if is_user_module(sys.modules.get(module)) and isinstance(value, types.BuiltinFunctionType):
            raise Unseen(f"{module}.{rv}, a compiled function of your own, whose code cannot be read")
        h.update(f"global:{module}.{rv}:{package_version(module)};".encode())
        return
    if not isinstance(rv, tuple) or len(rv) < 2:
        raise Unseen(f"a {_name(t)}, whose __reduce__ gives {type(rv).__name__}")
    h.update(f"object:{_name(t)}(".encode())
    _feed(h, rv[0])  # what rebuilds it (its class, mostly)
    _feed(h, rv[1])
    state = rv[2] if len(rv) > 2 else None
    if isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
        state = {**(state[0] or {}), **(state[1] or {})}  # (__dict__, __slots__)
    if isinstance(state, dict) and all(isinstance(k, str) for k in state):
        h.update(f"attrs[{len(state)}](".encode())
        for k in sorted(state):
            _feed(h, k)
            _child(h, state[k], f".{k}")
        h.update(b")")
    elif state is not None:
        _child(h, state, ".__getstate__()")
    for extra, where in zip(rv[3:5], ("[...]", "[...]"), strict=False):
        if extra is not None:
            _child(h, list(extra), where)
    h.update(b")")


def is_code(value: Any) -> bool:
    """Whether a value is code, keyed by what it does (its source and what it reaches)."""
    if inspect.isfunction(value) or inspect.ismethod(value) or isinstance(value, (type, functools.partial)):
        return True
    return callable(value) and callable(getattr(value, "__wrapped__", None))  # functools.wraps, lru_cache


def _numpy_value(value: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.ndarray, np.generic))


def _torch_value(value: Any, *path: str) -> bool:
    obj: Any = sys.modules.get("torch")
    for part in path:
        obj = getattr(obj, part, None)
    return isinstance(obj, type) and isinstance(value, obj)


_BIG = 1 << 20  # bytes from which an array's digest is kept while a digest (or a build) is in progress


def _feed_big(h: Any, value: Any, feed: Any) -> None:
    """An array or tensor; a big one by the digest of its content, made once per context
    (its state cannot change while one key is being made)."""
    try:
        big = value.nbytes >= _BIG
    except RuntimeError:  # a sparse tensor
        big = False
    if not big:
        feed(h, value)
        return
    known = _CTX.big.get(id(value))
    if known is None or known[0] is not value:
        sub = hashlib.sha256()
        feed(sub, value)
        known = _CTX.big[id(value)] = (value, sub.hexdigest())
    h.update(f"big:{known[1]};".encode())


def _feed_array(h: Any, value: Any) -> None:
    import numpy as np

    arr = np.asarray(value)
    kind = "array" if isinstance(value, np.ndarray) else f"scalar:{type(value).__name__}"
    h.update(f"{kind}:{arr.dtype.str}:{arr.dtype.descr}:{arr.shape}:".encode())
    if arr.dtype.hasobject:  # Python objects: their bytes are addresses, so each by content
        h.update(b"(")
        for i, v in enumerate(arr.reshape(-1).tolist()):
            _child(h, v, f"[{i}]")
        h.update(b")")
    elif arr.size:
        h.update(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))


def _feed_tensor(h: Any, value: Any) -> None:
    import torch

    t = value.detach()
    layout = str(t.layout).removeprefix("torch.")
    h.update(f"tensor:{str(t.dtype).removeprefix('torch.')}:{tuple(t.shape)}:{layout}(".encode())
    if t.is_meta or t.is_nested:
        raise Unseen(f"a {'meta' if t.is_meta else 'nested'} tensor, whose values cannot be read")
    if t.layout == torch.sparse_coo:
        c = t.coalesce()
        _feed_tensor(h, c.indices())
        _feed_tensor(h, c.values())
    elif t.layout != torch.strided:  # CSR, CSC, BSR, BSC
        compressed = t.crow_indices() if t.layout in (torch.sparse_csr, torch.sparse_bsr) else t.ccol_indices()
        plain = t.col_indices() if t.layout in (torch.sparse_csr, torch.sparse_bsr) else t.row_indices()
        for part in (compressed, plain, t.values()):
            _feed_tensor(h, part)
    elif t.is_quantized:
        h.update(f"{t.qscheme()}:".encode())
        _feed_tensor(h, t.int_repr())
        scale = (t.q_scale(), t.q_zero_point()) if t.qscheme() in (torch.per_tensor_affine,
                                                                     torch.per_tensor_symmetric) else \
            (t.q_per_channel_scales(), t.q_per_channel_zero_points(), t.q_per_channel_axis())
        _feed(h, scale)
    elif t.numel():
        flat = t.cpu().resolve_conj().resolve_neg().contiguous().reshape(-1)
        h.update(flat.view(torch.uint8).numpy())
    h.update(b")")


def _feed_hf(h: Any, value: Any) -> None:
    """A Hugging Face dataset by its own fingerprint."""
    try:
        _hf_state(h, value)
    except Exception as exc:
        raise Unseen(f"a {_name(type(value))}, which has no fingerprint: {type(exc).__name__}: {exc}") from None


def _hf_state(h: Any, value: Any) -> None:
    """A Hugging Face dataset by its own fingerprint, never by its pickle
    (:func:`flowdata.run.sources.huggingface.identity`); by its pickle only when
    ``datasets`` cannot hash it."""
    identity = huggingface.identity(value)
    if identity is not None:
        h.update(f"{identity};".encode())
        return
    h.update(f"pickle:{type(value).__qualname__}:".encode())
    h.update(pickle.dumps(value, protocol=4))


# torch's own bookkeeping in a module's __dict__: hooks, and the containers hashed apart
_MODULE_INTERNALS = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set")


def _feed_module(h: Any, module: Any) -> None:
    """A torch module by content: each submodule's class (and its source), training flag,
    settings, parameters and buffers (persistent or not). Its pickle is no key: it differs
    between equal instances."""
    if _torch_value(module, "jit", "ScriptModule"):  # compiled: its code and its tensors
        h.update(b"script(")
        for name, sub in module.named_modules():
            _feed(h, [name, getattr(sub, "original_name", ""), bool(sub.training), _script_code(sub)])
        _child(h, dict(module.state_dict()), "")
        h.update(b")")
        return
    h.update(b"module(")
    for name, sub in module.named_modules():
        h.update(f"{name}:{class_key(type(sub))}:{bool(sub.training)}(".encode())
        for key in sorted(vars(sub)):
            setting = vars(sub)[key]
            if key in _MODULE_INTERNALS or "hook" in key or key == "training" or key.startswith("__"):
                continue
            if _torch_value(setting, "nn", "Module"):
                continue  # a submodule: named_modules() visits it
            _feed(h, key)
            _child(h, setting, f".{name + '.' if name else ''}{key}")
        for kind in ("_parameters", "_buffers"):
            _child(h, {k: v for k, v in vars(sub).get(kind, {}).items() if v is not None}, f".{name}")
        h.update(b")")
    h.update(b")")


def _script_code(module: Any) -> str:
    try:
        return str(module.code)
    except Exception:  # a module with no methods of its own
        return ""


_CLASS_KEYS: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()


def class_key(cls: type) -> str:
    """A class by name and, where it can be read, its source (an edited forward changes it;
    read once per class object: its code does not change while it lives)."""
    key = _CLASS_KEYS.get(cls)
    if key is None:
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            source = ""
        key = _CLASS_KEYS[cls] = f"{_name(cls)}:{hashlib.sha256(source.encode()).hexdigest()[:16]}"
    return key
