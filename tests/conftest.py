"""Shared helpers: build a driver from source text written to a temporary module; a pool of
worker processes for the tests of one module."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import flowdata as fd


@pytest.fixture
def make_module(tmp_path: Path) -> Iterator[object]:
    """Writes source text to a uniquely named module file and imports it."""
    created: list[str] = []

    def make(source: str, name: str | None = None) -> ModuleType:
        name = name or f"fdmod_{uuid.uuid4().hex[:8]}"
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        created.append(name)
        return module

    yield make
    for name in created:
        sys.modules.pop(name, None)


@pytest.fixture
def build(make_module: object) -> object:
    """Builds a driver from source text (and optional config)."""

    def _build(source: str, config: dict[str, object] | None = None) -> fd.Driver:
        module = make_module(source)  # type: ignore[operator]
        return fd.Builder().with_modules(module).with_config(config or {}).build()

    return _build


@pytest.fixture(scope="module")
def pool() -> Iterator[fd.ProcessExecutor]:
    """Two worker processes, started once for the tests of a module that ask for them."""
    with fd.ProcessExecutor(num_workers=2) as ex:
        yield ex
