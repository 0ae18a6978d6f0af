"""The package's shape, checked: no import circle, the bundled modules on the public API
only, and one resolved call behind every way of running a graph.

Imports are read from the source (``ast``), every ``import`` counted -- at module level and
inside functions alike -- except those under ``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import flowdata as fd

ROOT = Path(__file__).resolve().parents[2]
# The public modules a module of nodes may import from (documented in docs/concepts.md).
PUBLIC = {"flowdata", "flowdata.columns", "flowdata.errors", "flowdata.io", "flowdata.media", "flowdata.report",
          "flowdata.stats", "flowdata.transforms", "flowdata.types"}


def _modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path) -> Iterator[tuple[str, list[str], int]]:
    """(module, names, line) of every import that can run."""

    def walk(node: ast.AST) -> Iterator[ast.AST]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                yield from (n for e in child.orelse for n in [e, *walk(e)])
                continue
            yield child
            yield from walk(child)

    for node in walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for module, names, _ in _imports(path):
            if module not in modules:
                continue
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules] or [module]
            edges[name].update(t for t in targets if t != name)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_flowdata_imports_another_in_a_circle() -> None:
    modules = _modules("flowdata")
    edges = _edges(modules)
    # The package's front door is for users: nothing inside imports it back.
    inward = sorted(m for m, targets in edges.items() if "flowdata" in targets and m != "flowdata")
    assert not inward, f"modules importing the package `flowdata` itself (import the module that defines the name): {inward}"
    circles = _circles({m: targets - {"flowdata"} for m, targets in edges.items()})
    assert not circles, "import circles (cut one edge: move what both need into a module neither imports):\n" + \
        "\n".join(" <-> ".join(c) for c in circles)


def test_the_bundled_modules_use_only_public_names() -> None:
    wrong = []
    for name, path in _modules("flowdata_modules").items():
        for module, names, line in _imports(path):
            if not (module == "flowdata" or module.startswith("flowdata.")):
                continue
            private = [n for n in names if n.startswith("_")]
            if module not in PUBLIC or private:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: from {module} import {', '.join(names)}")
    assert not wrong, "flowdata_modules import non-public names:\n" + "\n".join(wrong)


def test_no_module_reaches_into_a_driver_private_name() -> None:
    wrong = []
    for name, path in _modules("flowdata").items():
        if name == "flowdata.driver":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in ("driver", "dr", "self_driver")):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not wrong, "private Driver names used outside driver.py (use Driver.resolve()):\n" + "\n".join(wrong)


SOURCE = """
from flowdata import Collect, Parallel

def path(paths: list[str]) -> Parallel[str]:
    yield from paths

def length(path: str, scale: float = 1.0) -> float:
    return len(path) * scale

def total(length: Collect[float]) -> float:
    return sum(length)
"""


def test_resolve_gives_the_values_the_replaced_nodes_and_the_plan(build: Callable[..., fd.Driver]) -> None:
    dr = build(SOURCE, {"scale": 2.0})
    call = dr.resolve(["total"], {"paths": ["a", "bb"]})
    assert call.outputs == ("total",)
    assert dict(call.values) == {"scale": 2.0, "paths": ["a", "bb"]}
    assert call.replaced == ()
    assert [g.source for g in call.plan.groups] == ["path"]
    with pytest.raises(TypeError):
        call.values["scale"] = 3.0  # type: ignore[index]
    given = dr.resolve(["total"], {"paths": ["a"]}, {"total": 5.0})
    assert given.replaced == ("total",) and given.values["total"] == 5.0
    with pytest.raises(fd.InputError, match=r"'length' \(.*\) is per-sample in group 'path'"):
        dr.resolve(["length"], {"paths": ["a"]})
    assert dr.resolve(["length"], {"paths": ["a"]}, per_sample=True).plan.groups[0].source == "path"


@pytest.mark.parametrize("how", ["resolve", "execute", "dataset", "dataloader", "run_sample"])
def test_an_unread_input_is_warned_at_the_callers_line_on_every_path(
    build: Callable[..., fd.Driver], how: str,
) -> None:
    dr = build(SOURCE)
    inputs = {"paths": ["a", "bb"], "scael": 2.0}
    calls = {
        "resolve": lambda: dr.resolve(["total"], inputs),
        "execute": lambda: dr.execute(["total"], inputs),
        "dataset": lambda: dr.dataset(["length"], inputs),
        "dataloader": lambda: dr.dataloader(["length"], inputs),
        "run_sample": lambda: dr.run_sample(["length"], inputs=inputs),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls[how]()
    unread = [w for w in caught if "not read by any node" in str(w.message)]
    assert len(unread) == 1, [str(w.message) for w in caught]
    assert "'scael' (did you mean 'scale'?)" in str(unread[0].message)
    assert unread[0].filename == __file__, f"warned at {unread[0].filename}:{unread[0].lineno}"


def _room(module: str) -> str:
    """The package a module lives in (a package's door belongs to that package)."""
    path = _modules("flowdata")[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def test_no_module_imports_a_private_name_of_another_room() -> None:
    modules = _modules("flowdata")
    wrong = []
    for name, path in modules.items():
        for module, names, line in _imports(path):
            if module not in modules or _room(module) == _room(name):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: from {module} import {', '.join(private)}")
    assert not wrong, "private names imported across rooms (make them public in their room, or move them):\n" + \
        "\n".join(wrong)


def test_the_engine_section_lists_every_module_of_the_run_side() -> None:
    import re

    text = (ROOT / "docs" / "concepts.md").read_text()
    section = text[text.index("## The engine"):]
    section = section[:section.index("\n## ", 3)]
    listed = set(re.findall(r"^\| `(run/[\w/]+\.py)` \|", section, flags=re.M))
    present = {str(p.relative_to(ROOT / "flowdata")) for p in (ROOT / "flowdata" / "run").rglob("*.py")}
    assert listed == present, (f"docs/concepts.md's engine table misses {sorted(present - listed)} and lists "
                               f"{sorted(listed - present)}, which do not exist")


def test_outside_the_run_side_only_its_door_is_imported() -> None:
    """``flowdata.run`` is entered by its door (``from flowdata.run import Run``): no module
    outside ``flowdata/run/`` imports a module inside it, so its rooms can change behind it."""
    wrong = []
    for name, path in _modules("flowdata").items():
        if name == "flowdata.run" or name.startswith("flowdata.run."):
            continue
        for module, names, line in _imports(path):
            if module.startswith("flowdata.run.") or (module == "flowdata.run" and not names and name != "flowdata"):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {module} {names}")
    assert not wrong, "modules reaching past flowdata.run's door (import the name from flowdata.run):\n" + \
        "\n".join(wrong)


def test_every_name_of_the_run_door_is_there_and_listed() -> None:
    import importlib

    import flowdata.run as run

    door = [n for n in run.__all__ if n != "scratch"]
    assert sorted(door) == sorted(run._DOOR)
    for name in door:
        value = getattr(run, name)
        home = importlib.import_module(run._DOOR[name])
        assert value is getattr(home, name), name
    assert run.scratch is importlib.import_module("flowdata.run.scratch")
    with pytest.raises(AttributeError, match=r"module 'flowdata.run' has no attribute 'Engine'"):
        run.Engine  # noqa: B018 -- the engine stays behind the door
