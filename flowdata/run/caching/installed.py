"""Which code is the user's and which is installed: what a cache key reads and what it keys
by version.

A *user module* is one whose file lies outside the interpreter's installation (the standard
library and site-packages): its code is read into keys (:mod:`flowdata.run.caching.fingerprint`).
Anything installed -- flowdata itself included -- is keyed by its package's version.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import types

__all__ = ["is_user_module", "package_version"]


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {os.path.dirname(os.__file__), sys.prefix, sys.base_prefix}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots))


def is_user_module(module: types.ModuleType | None) -> bool:
    """Whether ``module`` is the user's own (a file outside the Python installation)."""
    if module is None:
        return False
    name = module.__name__
    if name == "flowdata" or name.startswith("flowdata."):
        return False  # the library itself: keyed by its version
    file = getattr(module, "__file__", None)
    if not file:
        return False  # built-in
    real = os.path.realpath(file)
    return not real.startswith(_installed_roots())


@functools.lru_cache(maxsize=256)
def package_version(module_name: str) -> str:
    """The installed version of the package a module belongs to ("?" when unknown)."""
    import importlib.metadata  # here: it costs about 30 ms to import, and only a pass-cache key needs it

    top = module_name.split(".")[0]
    try:
        return importlib.metadata.version(top)
    except Exception:
        return getattr(sys.modules.get(top), "__version__", "?")
