"""Small dataflow modules, each with a plain-Python oracle (``_oracle``) and ``CASES``.

Every module here is run by ``tests/conformance/test_executors.py`` through ``execute()`` on every
executor and compared with its oracle. Names starting with ``_`` are not nodes.
"""

import importlib
import pkgutil
from types import ModuleType


def all_dataflows() -> list[ModuleType]:
    """Every dataflow module of this package."""
    return [
        importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    ]
