"""Hamilton parity in Hamilton's own patterns (``@config.when``, ``@hamilton_exclude``,
default arguments, a later module overriding a node): each module run under Hamilton and
under flowdata in the same test."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import flowdata as fd

EXCLUDED = """
from hamilton.function_modifiers import config, hamilton_exclude

@hamilton_exclude
def helper(x):  # no annotations: not a node, so it needs none
    return x

@config.when(mode="a")
def value__a(n: int) -> int:
    return n + 1

@config.when(mode="b")
def value__b(n):  # not chosen under mode='a': needs no annotations either
    return n * 2

def doubled(value: int) -> int:
    return 2 * value
"""

DEFAULTS = """
def A(required: int, defaults_to_zero: int = 0) -> int:
    return required + defaults_to_zero

def D(defaults_to_zero: int) -> int:  # not asked for: its lack of a default does not count
    return defaults_to_zero
"""


def _hamilton(module: Any, outputs: list[str], inputs: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    from hamilton import driver

    return dict(driver.Builder().with_modules(module).with_config(config).build().execute(outputs, inputs=inputs))


@pytest.mark.parametrize(("source", "outputs", "inputs", "config"), [
    (EXCLUDED, ["doubled"], {"n": 3}, {"mode": "a"}),
    (DEFAULTS, ["A"], {"required": 10}, {}),
])
def test_the_same_result_as_hamilton(make_module: Callable[[str], Any], source: str, outputs: list[str],
                                     inputs: dict[str, Any], config: dict[str, Any]) -> None:
    module = make_module(source)
    theirs = _hamilton(module, outputs, inputs, config)
    ours = fd.Builder().with_modules(module).with_config(config).build().execute(outputs, inputs=inputs)
    assert ours == theirs


def test_an_asked_node_without_a_default_still_needs_its_input(make_module: Callable[[str], Any]) -> None:
    dr = fd.Builder().with_modules(make_module(DEFAULTS)).build()
    with pytest.raises(fd.InputError, match=r"missing input 'defaults_to_zero':\n  'defaults_to_zero': read by D \("):
        dr.execute(["A", "D"], inputs={"required": 1})


PARALLEL = """
from hamilton.htypes import Collect, Parallelizable

def par(n: int) -> Parallelizable[int]:
    for i in range(n):
        yield i

def sq(par: int) -> int:
    return par * par

def total(sq: Collect[int]) -> int:
    return sum(sq)
"""

REPLACEMENT = """
def sq(par: int) -> int:
    return par * par + 1000
"""


@pytest.mark.procs
def test_a_later_module_overrides_a_node(make_module: Callable[[str], Any]) -> None:
    from hamilton import driver
    from hamilton.execution.executors import SynchronousLocalTaskExecutor

    first, second = make_module(PARALLEL), make_module(REPLACEMENT)
    theirs = (driver.Builder().with_modules(first, second).allow_module_overrides()
              .enable_dynamic_execution(allow_experimental_mode=True)
              .with_local_executor(SynchronousLocalTaskExecutor()).build().execute(["total"], inputs={"n": 3}))
    dr = fd.Builder().with_modules(first, second).allow_module_overrides().build()
    assert dr.execute(["total"], inputs={"n": 3}) == dict(theirs) == {"total": 3005}
    assert dr.execute(["total"], inputs={"n": 3}, executor="processes") == {"total": 3005}  # workers too
    with pytest.raises(fd.GraphError, match=r"FD004 duplicate-node: node 'sq' is defined twice"):
        fd.Builder().with_modules(first, second).build()


