"""One fault, one class: every fault raises the same FlowdataError subclass through
``execute()``, the loader and ``run_sample()``, and every such class lives in
``flowdata.errors`` and is drawn in its tree.

The table below walks the faults -- bad argument values, a node raising, a source raising,
a timeout, too many skips, a dead worker, a missing input, a type mismatch at run time --
and names, for each, the exact class and the message every path gives. A path is left out
only where the call has no such argument (``num_workers`` is the loader's; ``chunk_size``
``execute()``'s) or the fault cannot happen there (``run_sample()`` runs one sample in this
process: no skips, no workers, no timeout).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import flowdata as fd
from flowdata import errors
from flowdata.errors import WorkerDied

FLOW = """
import os
import time

from flowdata import Collect, Parallel


def item(n: int, mode: str = "ok") -> Parallel[int]:
    for i in range(n):
        if mode == "source" and i == 3:
            raise OSError(f"cannot read item {i}")
        yield i


def value(item: int, mode: str = "ok") -> int:
    if item == 3:
        if mode == "raise":
            raise ValueError(f"bad item {item}")
        if mode == "type":
            return "three"  # a str where the annotation says int
        if mode == "sleep":
            for _ in range(200):  # 10 s at most, in short sleeps
                time.sleep(0.05)
        if mode == "kill":
            os._exit(3)  # the process ends as a native crash or the OOM killer would end it
    return item


def total(value: Collect[int], mode: str = "ok") -> int:
    if mode == "collect":
        raise ZeroDivisionError("no total")
    return sum(value)


def centered(value: int, total: int) -> int:
    return value * 6 - total
"""


@dataclass(frozen=True)
class Fault:
    """One fault: its inputs, the arguments of each path (None: the path has no such
    argument, or the fault cannot happen there), and what every path raises."""

    cls: type[fd.FlowdataError]
    match: str
    inputs: dict[str, Any] = field(default_factory=lambda: {"n": 6})
    execute: dict[str, Any] | None = field(default_factory=dict)
    loader: dict[str, Any] | None = field(default_factory=dict)
    run_sample: dict[str, Any] | None = None
    outputs: tuple[str, ...] = ()  # asked of every path instead of total (execute) or value
    loader_outputs: tuple[str, ...] = ()  # asked of the loader (a value that reads a Collect result)


SKIP = {"on_error": "skip"}
MAX_SKIPPED = (r"max_skipped=.*: expected an int >= 0 \(a count of samples\), a float from 0\.0 to 1\.0 "
               r"\(a fraction of the samples seen\), or None for no limit")

FAULTS: dict[str, Fault] = {
    # --- bad argument values: an InputError before anything runs -------------------------
    "batch_size=0": Fault(fd.InputError, r"^batch_size=0: expected a positive int \(samples per batch",
                          execute={"batch_size": 0}, loader={"batch_size": 0}),
    "batch_size=True": Fault(fd.InputError, r"^batch_size=True: expected a positive int",
                             execute={"batch_size": True}, loader={"batch_size": True}),
    "batch_size='8'": Fault(fd.InputError, r"^batch_size='8': expected a positive int",
                            execute={"batch_size": "8"}, loader={"batch_size": "8"}),
    "num_workers=-1": Fault(fd.InputError, r"^num_workers=-1: expected an int >= 0 \(DataLoader worker processes",
                            execute=None, loader={"num_workers": -1}),
    "num_workers='2'": Fault(fd.InputError, r"^num_workers='2': expected an int >= 0",
                             execute=None, loader={"num_workers": "2"}),
    "on_error='ignore'": Fault(fd.InputError, r"^on_error='ignore': expected 'raise' or 'skip'",
                               execute={"on_error": "ignore"}, loader={"on_error": "ignore"}),
    "max_skipped=-1": Fault(fd.InputError, "^" + MAX_SKIPPED, execute={**SKIP, "max_skipped": -1},
                            loader={**SKIP, "max_skipped": -1}),
    "max_skipped=1.5": Fault(fd.InputError, "^" + MAX_SKIPPED, execute={**SKIP, "max_skipped": 1.5},
                             loader={**SKIP, "max_skipped": 1.5}),
    "max_skipped='5'": Fault(fd.InputError, "^" + MAX_SKIPPED, execute={**SKIP, "max_skipped": "5"},
                             loader={**SKIP, "max_skipped": "5"}),
    "timeout=0": Fault(fd.InputError, r"^timeout=0: expected a positive number of seconds, or None for no limit",
                       execute={"timeout": 0}, loader={"timeout": 0}),
    "rank=2 of 2": Fault(fd.InputError, r"^rank=2: expected an int from 0 to 1 \(this process's rank among "
                         r"world_size=2 ranks\)", execute=None, loader={"rank": 2, "world_size": 2}),
    "rank=-1": Fault(fd.InputError, r"^rank=-1: expected an int >= 0", execute=None,
                     loader={"rank": -1, "world_size": 2}),
    "world_size=0": Fault(fd.InputError, r"^world_size=0: expected a positive int \(the number of ranks\)",
                          execute=None, loader={"rank": 0, "world_size": 0}),
    "cache_dir=5": Fault(fd.InputError, r"^cache_dir=5: expected a folder's path \(a str or os\.PathLike\), or None",
                         execute={"cache_dir": 5}, loader={"cache_dir": 5}, run_sample={"cache_dir": 5}),
    "cache without cache_dir": Fault(fd.InputError, r"^cache=\['value'\] needs cache_dir=",
                                     execute={"cache": ["value"]}, loader={"cache": ["value"]},
                                     run_sample={"cache": ["value"]}),
    "shuffle_buffer=0": Fault(fd.InputError, r"^shuffle_buffer=0: expected a positive int \(items a stream's "
                              r"shuffle buffer holds", execute=None,
                              loader={"streaming": True, "shuffle": True, "shuffle_buffer": 0}),
    "executor='threads'": Fault(fd.InputError, r"^unknown executor 'threads'\n  fix: use 'inline', 'processes'",
                                execute={"executor": "threads"}, loader={"executor": "threads"}),
    "executor=object()": Fault(fd.InputError, r"^executor <object object at .*> has no map\(fn, tasks, \*, context\)",
                               execute={"executor": object()}, loader={"executor": object()}),
    "chunk_size=0": Fault(fd.InputError, r"^chunk_size=0: expected a positive int, or None to adapt",
                          execute={"chunk_size": 0}, loader=None),
    # --- what the call asks of the graph -------------------------------------------------
    "missing input": Fault(fd.InputError, r"^missing input 'n':\n  'n': read by item", inputs={}, run_sample={}),
    "unknown output": Fault(fd.InputError, r"^unknown output 'valeu' \(did you mean 'value'\?\)",
                            outputs=("valeu",), run_sample={}),
    # --- the user's code fails -----------------------------------------------------------
    "a per-sample node raises": Fault(
        fd.SampleError, r"^node 'value' \(.*:\d+\) failed on sample 3 of group 'item' \(pass 1, worker main\): "
        r"ValueError: bad item 3", inputs={"n": 6, "mode": "raise"}, run_sample={}),
    "a Collect node raises": Fault(
        fd.NodeError, r"^node 'total' \(.*:\d+\) failed: ZeroDivisionError: no total",
        inputs={"n": 6, "mode": "collect"}, loader_outputs=("centered",)),
    "a source raises": Fault(
        fd.NodeError, r"^node 'item' \(.*:\d+\) failed: OSError: cannot read item 3 \(while producing sample 3\)",
        inputs={"n": 6, "mode": "source"}, run_sample={}),
    "a type mismatch at run time": Fault(
        fd.SampleError, r"^node 'value' \(.*:\d+\) failed on sample 3 of group 'item' .*: ReturnTypeError: "
        r"'value' is declared '-> int'", inputs={"n": 6, "mode": "type"}, run_sample={}),
    "a node past its timeout": Fault(
        fd.SampleError, r"^node 'value' \(.*:\d+\) failed on sample 3 of group 'item' .*: SampleTimeout: "
        r"timed out after 0\.5 s", inputs={"n": 6, "mode": "sleep"}, execute={"timeout": 0.5},
        loader={"timeout": 0.5}),
    "too many skipped": Fault(
        fd.TooManySkipped, r"^1 samples skipped, more than max_skipped=0:\n  sample 3 \(3\) at node 'value'",
        inputs={"n": 6, "mode": "raise"}, execute={**SKIP, "max_skipped": 0}, loader={**SKIP, "max_skipped": 0}),
    # --- the machine fails ---------------------------------------------------------------
    "a worker dies": Fault(
        WorkerDied, r"^a (worker process of ProcessExecutor\(num_workers=1.*\)|DataLoader worker) died",
        inputs={"n": 6, "mode": "kill"}, execute={"executor": fd.ProcessExecutor(num_workers=1)},
        loader={"num_workers": 1}),
}

PATHS = ("execute", "loader", "run_sample")
# A row that starts a worker process is marked `procs` (left out of the fast tier).
STARTS_PROCESSES = {"a worker dies"}
CASES = [pytest.param(name, path, id=f"{name}-{path}",
                      marks=[pytest.mark.procs] if name in STARTS_PROCESSES else [])
         for name, fault in FAULTS.items() for path in PATHS if getattr(fault, path) is not None]


@pytest.fixture
def dr(make_module: Callable[[str], Any]) -> fd.Driver:
    return fd.Builder().with_modules(make_module(FLOW)).build()


def _call(dr: fd.Driver, fault: Fault, path: str) -> None:
    kwargs = dict(getattr(fault, path))
    if path == "execute":
        dr.execute(list(fault.outputs or ("total",)), inputs=fault.inputs, **kwargs)
    elif path == "loader":
        for _ in dr.dataloader(list(fault.loader_outputs or fault.outputs or ("value",)), inputs=fault.inputs,
                               **kwargs):
            pass
    else:
        dr.run_sample(list(fault.outputs or ("value",)), inputs=fault.inputs, index=3, **kwargs)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(("name", "path"), CASES)
def test_a_fault_raises_the_same_class_on_every_path(dr: fd.Driver, name: str, path: str) -> None:
    fault = FAULTS[name]
    with pytest.raises(fault.cls, match=fault.match) as info:
        _call(dr, fault, path)
    # The exact class, not a subclass of it: the point is that the paths agree.
    assert type(info.value) is fault.cls, (path, type(info.value), str(info.value))


def test_every_fault_of_the_table_has_both_main_paths_or_says_why() -> None:
    """A row with one path must be an argument the other call lacks (the table's rule)."""
    execute_args = set(inspect.signature(fd.Driver.execute).parameters)
    loader_args = set(inspect.signature(fd.Driver.dataloader).parameters)
    for name, fault in FAULTS.items():
        if fault.execute is None:
            assert fault.loader and not set(fault.loader) <= execute_args, name
        if fault.loader is None:
            assert fault.execute and not set(fault.execute) <= loader_args, name


@pytest.mark.parametrize("path", PATHS)
def test_an_unwritable_cache_dir_is_warned_and_the_call_computes_everything(
    dr: fd.Driver, tmp_path: Path, path: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Not an error on any path: the call goes on without caching, and says so."""
    in_the_way = tmp_path / "cache"
    in_the_way.write_text("a file where the cache folder should be")
    kwargs: dict[str, Any] = {"cache_dir": in_the_way, "cache": ["value"], "inputs": {"n": 6}}
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        if path == "execute":
            assert dr.execute(["total"], **kwargs) == {"total": 15}
        elif path == "loader":
            assert [int(b["value"]) for b in dr.dataloader(["value"], **kwargs)] == list(range(6))
        else:
            assert dr.run_sample(["value"], index=3, **kwargs) == {"value": 3}
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(re.match(rf"cache_dir {re.escape(str(in_the_way))}.* cannot be written \(\w+Error: .*\); going on "
                        "without caching", m) for m in said), said


# --- every FlowdataError subclass lives in flowdata.errors and is drawn in its tree --------

def _flowdata_error_classes() -> set[type[BaseException]]:
    """Every FlowdataError subclass defined anywhere in the package (its modules imported)."""
    import flowdata

    for info in pkgutil.walk_packages(flowdata.__path__, "flowdata."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:  # an optional dependency that is not installed here
            if exc.name is None or exc.name.split(".")[0] == "flowdata":
                raise
    found: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [fd.FlowdataError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("flowdata") and cls not in found:
            found.add(cls)
            todo.extend(cls.__subclasses__())
    return found


_DRAWN = re.compile(r"^(?P<lead>[ │]*(?:[├└]── )?)(?P<name>[A-Z]\w+)\b(?!')")


def _drawn(text: str) -> list[tuple[int, str]]:
    """The classes drawn in a tree, with the column each name starts at: a name starts a
    line at the tree's left edge or follows a branch (``├── ``); the lines that go on a
    description start with ``│`` or spaces only, past the edge."""
    start = text.index("FlowdataError ")
    edge = start - (text.rindex("\n", 0, start) + 1)
    block = text[start - edge : text.index("\n\n", text.index("UnreadInputWarning", start))]
    found = []
    for line in block.splitlines():
        m = _DRAWN.match(line)
        if m is not None and (m.group("lead").endswith("── ") or len(m.group("lead")) == edge):
            found.append((len(m.group("lead")), m.group("name")))
    return found


def _tree(text: str) -> list[str]:
    """The class names drawn in a tree."""
    return [name for _, name in _drawn(text)]


def test_every_flowdata_error_is_defined_in_errors_and_drawn_in_its_tree() -> None:
    classes = _flowdata_error_classes()
    assert {WorkerDied, errors.PeerStopped, fd.RankError, fd.SampleError} <= classes
    assert {c.__name__: c.__module__ for c in classes if c.__module__ != "flowdata.errors"} == {}
    docstring = _tree(errors.__doc__ or "")
    page = _tree((Path(__file__).parents[2] / "docs" / "errors.md").read_text())
    warnings = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)
                and issubclass(getattr(errors, n), Warning)}
    drawn = {c.__name__ for c in classes} | warnings
    assert sorted(docstring) == sorted(drawn), "errors.py's docstring draws another tree"
    assert sorted(page) == sorted(drawn), "docs/errors.md draws another tree"
    for cls in classes:  # every class is public in flowdata.errors, and listed there
        assert cls.__name__ in errors.__all__ and getattr(errors, cls.__name__) is cls


def test_the_tree_draws_each_class_under_its_base() -> None:
    """The indentation of the drawn tree is the class hierarchy (``SampleError`` under
    ``NodeError``, everything else right under ``FlowdataError``)."""
    for text in (errors.__doc__ or "", (Path(__file__).parents[2] / "docs" / "errors.md").read_text()):
        parents: dict[int, str] = {}
        for depth, name in _drawn(text):
            parents = {d: n for d, n in parents.items() if d < depth}
            cls = getattr(errors, name)
            if parents and not issubclass(cls, Warning):
                base = getattr(errors, parents[max(parents)])
                assert cls.__bases__[0] is base, (name, base)
            parents[depth] = name
