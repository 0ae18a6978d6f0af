"""Every dataflow in tests/dataflows through execute() on every executor, against its oracle."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import flowdata as fd
from tests.dataflows import all_dataflows

DATAFLOWS = all_dataflows()
CASES = [(m, i) for m in DATAFLOWS for i in range(len(m.CASES))]


@pytest.fixture(scope="module")
def pool() -> Iterator[fd.ProcessExecutor]:
    with fd.ProcessExecutor(num_workers=2) as ex:
        yield ex


def _ids(case: tuple[ModuleType, int]) -> str:
    return f"{case[0].__name__.rsplit('.', 1)[-1]}-{case[1]}"


def test_every_dataflow_has_an_oracle() -> None:
    assert len(DATAFLOWS) >= 7
    for m in DATAFLOWS:
        assert callable(m._oracle) and m.CASES and m.OUTPUTS, m.__name__


@pytest.mark.parametrize("case", CASES, ids=_ids)
@pytest.mark.parametrize("executor", ["inline", "processes", "small-chunks"])
def test_execute_matches_oracle(case: tuple[ModuleType, int], executor: str, pool: fd.ProcessExecutor) -> None:
    module, i = case
    inputs: dict[str, Any] = module.CASES[i]
    dr = fd.Builder().with_modules(module).build()
    if executor == "inline":
        got = dr.execute(module.OUTPUTS, inputs=inputs)
    elif executor == "processes":
        got = dr.execute(module.OUTPUTS, inputs=inputs, executor=pool)
    else:
        got = dr.execute(module.OUTPUTS, inputs=inputs, executor=pool, chunk_size=3)
    assert got == module._oracle(**inputs)
