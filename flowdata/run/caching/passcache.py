"""The pass cache: reduction results stored under a fingerprint of what produced them.

A pass whose Collect nodes are all reductions can be skipped when its results are on disk
under the same *key*. The key is a SHA-256 over:

- the **source items**: each item's repr, and for every string anywhere in it (nested
  lists and dicts included) that names an existing file, the file's size and modification
  time (so editing a file changes the key; its contents are not read);
- the **code** of every node the pass runs and of **everything it reaches** -- module-level
  constants, functions and classes of the user's own modules, transitively; installed
  libraries by version (see :mod:`flowdata.run.caching.fingerprint`) -- with each reducer's class and
  options;
- the **whole values** the pass reads (inputs, once nodes, earlier Collect results), the
  graph's **config**, and the files they name, each digested by its state
  (:func:`flowdata.run.caching.digest.digest`: arrays by dtype, shape and bytes; torch modules by their
  classes, settings and tensors; dataclasses and other objects through their attributes);
  and the versions of flowdata, numpy and torch.

An entry is a folder ``pass-<key>`` holding ``manifest.json`` and one ``.npz`` per reduction
with its ``state_dict`` (plain arrays, loaded with ``allow_pickle=False``). It is written to
a temporary folder and renamed into place, so a reader never sees half an entry. The
manifest records each file's SHA-256; a missing, truncated or altered file is reported in
the log and the pass is recomputed — a cache entry is never trusted blindly. A FIFO, socket,
device or folder where one of its files should be is never opened for reading (a FIFO
would wait for a writer): the entry is ignored, left alone, said once per process, and the
pass computed (:mod:`flowdata.io`).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from flowdata.run.caching.fingerprint import digest
from flowdata.run.writers import tag

__all__ = ["Note", "PassCache", "digest", "fingerprint_items", "say", "unwritable"]

log = logging.getLogger("flowdata.cache")

_VERSION = 1


def fingerprint_items(items: Iterable[Any]) -> tuple[str, int]:
    """(SHA-256, count) of a source's items; files named in them add size and mtime."""
    from flowdata.run.caching.fingerprint import file_stats

    h = hashlib.sha256()
    n = 0
    for item in items:
        h.update(repr(item).encode())
        for _, size, mtime in file_stats(item):  # any string in the item, nested ones included
            h.update(f"|{size}:{mtime}".encode())
        h.update(b"\n")
        n += 1
    return h.hexdigest(), n


class PassCache:
    """Reduction states on disk, by key. See the module docstring.

    Args:
        directory: Where entries live (created when needed).
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = os.fspath(directory)

    def _entry(self, key: str) -> str:
        return os.path.join(self.directory, f"pass-{key[:32]}")

    def load(self, key: str, names: Iterable[str]) -> dict[str, dict[str, Any]] | None:
        """The stored states of ``names`` under ``key``, or None (missing or corrupt)."""
        found = self.load_entry(key, names)
        return None if found is None else found[0]

    def load_entry(self, key: str, names: Iterable[str]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]] | None:
        """The stored states of ``names`` under ``key`` and the entry's ``about`` record."""
        import numpy as np

        from flowdata.io import NotAFile, open_regular

        entry = self._entry(key)
        manifest_path = os.path.join(entry, "manifest.json")
        if not os.path.exists(manifest_path):
            return None
        try:
            with open_regular(manifest_path, "r", encoding="utf-8") as f:
                manifest = json.load(f)
            if manifest.get("version") != _VERSION or manifest.get("key") != key:
                raise ValueError("manifest does not match this key")
            states: dict[str, dict[str, Any]] = {}
            for name in names:
                meta = manifest["nodes"][name]
                with open_regular(os.path.join(entry, meta["file"])) as f:
                    data = f.read()
                if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                    raise ValueError(f"checksum of {meta['file']} does not match")
                with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                    states[name] = {k: npz[k] for k in npz.files}
            about = manifest.get("about", {})
            if not isinstance(about, dict):
                raise ValueError("manifest's 'about' is not a record")
            return states, about
        except NotAFile as exc:  # never made by flowdata: maybe another program's, so left where it is
            say([("flowdata.cache", f"foreign:{exc.path}",
                  f"cache entry {entry} holds {exc}: the entry is ignored and left alone, and the pass is "
                  "computed (fix: remove the entry's folder, or give cache_dir a folder that only flowdata "
                  "writes to)")])
            return None
        except Exception as exc:  # any damage: say so, set the entry aside, recompute
            log.warning("cache entry %s is unreadable (%s: %s); recomputing", entry, type(exc).__name__, exc)
            self._discard(entry)
            return None

    def _discard(self, entry: str) -> None:
        """Moves a damaged entry out of the way (renamed first: a reader never sees it half gone)."""
        try:
            aside = tempfile.mkdtemp(prefix=f".bad-{tag()}-", dir=self.directory)
            os.rename(entry, os.path.join(aside, "entry"))
        except OSError:
            return  # read-only, or another process moved it already
        shutil.rmtree(aside, ignore_errors=True)

    def store(self, key: str, states: Mapping[str, Mapping[str, Any]], about: Mapping[str, Any]) -> str | None:
        """Writes an entry atomically; returns its folder, or None when it could not be written.

        Safe with any number of processes on one directory: the entry is written to a
        temporary folder and renamed into place, and an entry already there (another
        process won the race) is kept and used -- an existing entry is never removed here,
        since someone may be reading it. A directory that cannot be written (read-only,
        full, a file in the way) gives one warning naming it, leaves nothing behind, and
        the run goes on without caching.
        """
        import numpy as np

        entry = self._entry(key)
        tmp: str | None = None
        try:
            os.makedirs(self.directory, exist_ok=True)
            _sweep(self.directory)
            tmp = tempfile.mkdtemp(prefix=f".tmp-{tag()}-", dir=self.directory)
            nodes = {}
            for name, state in states.items():
                buf = io.BytesIO()
                np.savez(buf, allow_pickle=False, **{k: np.asarray(v) for k, v in state.items()})
                data = buf.getvalue()
                file = f"{hashlib.sha256(name.encode()).hexdigest()[:16]}.npz"
                with open(os.path.join(tmp, file), "wb") as f:
                    f.write(data)
                nodes[name] = {"file": file, "sha256": hashlib.sha256(data).hexdigest()}
            with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as f:
                json.dump({"version": _VERSION, "key": key, "nodes": nodes, "about": dict(about)}, f, indent=1)
            try:
                os.rename(tmp, entry)  # atomic; fails when the entry exists
                tmp = None
            except OSError:
                if not os.path.isdir(entry):
                    raise
                log.info("cache entry %s was stored by another process meanwhile; keeping it", entry)
            return entry
        except OSError as exc:
            say([unwritable(self.directory, exc)])
            return None
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


_TEMPORARY = re.compile(r"^\.(?:tmp|bad)-(?:(\d+)~([A-Za-z0-9._-]+)-)?[A-Za-z0-9_]+(?:\.gone)?$")
"""An entry being written (``.tmp-<pid>~<host>-<random>``) or removed (``.bad-...``);
without ``<pid>~<host>``: an older flowdata's."""

_SWEPT: set[str] = set()  # the cache_dirs this process has swept


def _sweep(directory: str) -> None:
    """Removes the temporary entries in ``directory`` whose writer is gone (killed while
    writing or removing one: :func:`flowdata.run.writers.gone`), once per process; a
    warning says how many and how many bytes."""
    from flowdata.run.writers import gone

    if directory in _SWEPT:
        return
    _SWEPT.add(directory)
    files = size = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        found = _TEMPORARY.match(name)
        path = os.path.join(directory, name)
        if found is None or not gone(path, int(found[1] or 0), found[2]):
            continue
        took = sum(os.path.getsize(os.path.join(top, f)) for top, _, fs in os.walk(path) for f in fs)
        aside = path + ".gone"  # renamed first: a folder half removed is not met again
        try:
            os.rename(path, aside)
        except OSError:
            continue  # taken by another process meanwhile, or read-only: left
        shutil.rmtree(aside, ignore_errors=True)
        files, size = files + 1, size + took
    if files:
        say([("flowdata.cache", f"swept:{os.path.abspath(directory)}",
              f"pass cache {directory}: removed {files} temporary entr{'ies' if files != 1 else 'y'} "
              f"({size:,} bytes) left by writers that were killed while writing")])


Note = tuple[str, str, str]
"""A warning to give once per process: (logger, what it is about, message). Made where a
cache is read or written -- maybe a worker process -- and said where the run is driven
(:func:`say`), so that several workers meeting one fault give one warning."""

_SAID: set[str] = set()


def say(notes: Iterable[Note]) -> None:
    """Logs each note as a warning, unless one about the same thing was logged in this process."""
    for logger, about, message in notes:
        if about not in _SAID:
            _SAID.add(about)
            logging.getLogger(logger).warning("%s", message)


def unwritable(directory: str, exc: BaseException) -> Note:
    """The note that ``directory`` (a ``cache_dir``) cannot be written: one per ``cache_dir``
    and process, whichever of its caches (passes, samples, a loader's index) found it."""
    return ("flowdata.cache", f"unwritable:{os.path.abspath(directory)}",
            f"cache_dir {directory} cannot be written ({type(exc).__name__}: {exc}); going on without caching")
