"""The sample's part of a sample cache key: each item of a chunk as bytes that say what it is.

A sample's key (:mod:`flowdata.run.caching.samplecache`) is the SHA-256 of its cached node's
base digest and of its item **by value**, with the size and modification time of every
file the item names (and its index when a node upstream reads ``sample_index``). This
module makes the item's part once per chunk, for every cached node of the pass, at a cost
of microseconds per sample:

- a plain item -- ``str``, ``int``, ``float``, ``bool``, ``bytes``, ``None``, or lists,
  tuples and dicts (string keys) of those, exactly those types -- is its ``repr`` (which
  tells every such value from every other: ``1``, ``1.0``, ``True`` and ``'1'`` differ);
- a table's rows that come as one record batch (:class:`~flowdata.columns.ArrowRows`) are
  read column by column, never as a dict per row: the schema (names and types), then each
  cell's ``repr``, for columns of strings, integers, floats, booleans and nulls (a batch
  with a column of another type is read row by row, as below);
- anything else by its state digest (:func:`flowdata.run.caching.fingerprint.digest`), as
  every key in flowdata is made.

Each string in the item (a cell, or one nested in a list or dict) that names an existing
file adds that file's size and modification time (``os.stat`` once per distinct string
and chunk; a table's column of four labels costs four). An item whose state cannot be
read raises :class:`~flowdata.run.caching.digest.Unseen`.

The item is keyed by value, not by its position in the source: a source whose items move
(a folder listing that gains a file ahead of the others) keeps the hits of every item it
still yields, and no fingerprint of the whole source is made when a loader is built (it
would read every row, and ``stat`` every string of a table, each time). What the source
reads -- its inputs, a table given as one -- is part of the node's base already: another
table is another base, where every sample misses. The price is a few microseconds per
sample, most of it the ``stat`` of each distinct string.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from typing import Any

from flowdata.columns import ArrowRows

__all__ = ["identities", "keys_of"]

_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})
_NOT_SEEN: Any = object()


def keys_of(base: str, identity: Sequence[bytes], indices: Sequence[int] | None) -> list[bytes]:
    """The keys (32-byte SHA-256 digests) of a chunk's samples of one cached node: its base
    digest, each sample's :func:`identities` part, and its index when ``indices`` is given."""
    start = hashlib.sha256(b"flowdata-sample-key\0" + base.encode() + b"\0")
    out = []
    copy = start.copy
    if indices is None:
        for part in identity:
            h = copy()
            h.update(part)
            out.append(h.digest())
    else:
        for part, i in zip(identity, indices, strict=True):
            h = copy()
            h.update(part)
            h.update(b"\0#%d" % i)  # a file's part starts with a digit, never with "#"
            out.append(h.digest())
    return out


def identities(items: Sequence[Any]) -> list[bytes]:
    """Each item's part of its keys (see the module docstring).

    Raises:
        flowdata.run.caching.digest.Unseen: an item holds an object whose state cannot be read.
    """
    named: dict[str, Any] = {}  # string -> its file's (size, mtime), or None: one stat per string
    if isinstance(items, ArrowRows):
        got = _arrow_rows(items.data, named)
        if got is not None:
            return got
    return [_one(item, named) for item in items]


def _file(text: str, named: dict[str, Any]) -> Any:
    """``(size, mtime_ns)`` of the regular file ``text`` names, or None."""
    got = named.get(text, _NOT_SEEN)
    if got is _NOT_SEEN:
        got = None
        if len(text) < 4096 and "\0" not in text:
            try:
                st = os.stat(text)
            except (OSError, ValueError):
                pass
            else:
                if stat.S_ISREG(st.st_mode):
                    got = (st.st_size, st.st_mtime_ns)
        named[text] = got
    return got


def _files(strings: Sequence[str], named: dict[str, Any]) -> bytes:
    """The part of the files the strings name: ``\\0<which>:<size>:<mtime>`` each (``repr``
    never writes a NUL byte, so this part cannot be mistaken for the value's)."""
    out = []
    for which, text in enumerate(strings):
        found = _file(text, named)
        if found is not None:
            out.append(f"\0{which}:{found[0]}:{found[1]}")
    return "".join(out).encode()


def _one(item: Any, named: dict[str, Any]) -> bytes:
    t = type(item)
    if t is str:
        found = _file(item, named)
        tail = b"" if found is None else f"\x000:{found[0]}:{found[1]}".encode()
        return b"p" + repr(item).encode("utf-8", "surrogatepass") + tail
    if t in _PLAIN:
        return b"p" + repr(item).encode()
    strings: list[str] = []
    if _plain(item, strings):
        return b"p" + repr(item).encode("utf-8", "surrogatepass") + _files(strings, named)
    from flowdata.run.caching.fingerprint import digest, file_stats

    files = "".join(f"\0{path!r}:{size}:{mtime}" for path, size, mtime in file_stats(item))
    return b"d" + digest(item).encode() + files.encode("utf-8", "surrogatepass")


def _plain(value: Any, strings: list[str], depth: int = 0) -> bool:
    """Whether ``value`` is plain (see the module docstring); its strings, in order, into ``strings``."""
    t = type(value)
    if t is str:
        strings.append(value)
        return True
    if t in _PLAIN:
        return True
    if depth > 20:
        return False
    if t is list or t is tuple:
        return all(_plain(v, strings, depth + 1) for v in value)
    if t is dict:
        return all(type(k) is str and _plain(v, strings, depth + 1) for k, v in value.items())
    return False


def _arrow_rows(data: Any, named: dict[str, Any]) -> list[bytes] | None:
    """The parts of a record batch's (or table's) rows, column by column; None when a
    column is of a type read row by row."""
    import pyarrow as pa

    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer, pa.types.is_boolean,
             pa.types.is_null)
    columns: list[list[str]] = []
    texts: list[list[Any]] = []
    for i, field in enumerate(data.schema):
        t = field.type
        if not (any(k(t) for k in kinds) or pa.types.is_float32(t) or pa.types.is_float64(t)):
            return None
        values = data.column(i).to_pylist()
        columns.append(list(map(repr, values)))
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            texts.append(values)
    schema = repr([(f.name, str(f.type)) for f in data.schema])
    head = "a" + hashlib.sha256(schema.encode("utf-8", "surrogatepass")).hexdigest()
    rows = ["\0".join((head, *cells)) for cells in zip(*columns, strict=True)] if columns else [head] * len(data)
    if texts:
        for which, values in enumerate(texts):
            for r, text in enumerate(values):
                found = None if text is None else _file(text, named)
                if found is not None:
                    rows[r] += f"\0{which}:{found[0]}:{found[1]}"
    return [r.encode("utf-8", "surrogatepass") for r in rows]
