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


LOADER_CASES = [(m, i) for m in DATAFLOWS if hasattr(m, "LOADER_OUTPUTS") for i in range(len(m.CASES))]


def _flatten(value: Any) -> list[Any]:
    return value.tolist() if hasattr(value, "tolist") else list(value)


def test_loader_dataflows_cover_most_modules() -> None:
    assert len({m for m, _ in LOADER_CASES}) >= 6


@pytest.mark.parametrize("case", LOADER_CASES, ids=_ids)
@pytest.mark.parametrize("workers", [0, 2])
def test_loader_matches_oracle(case: tuple[ModuleType, int], workers: int) -> None:
    module, i = case
    inputs: dict[str, Any] = module.CASES[i]
    expected = module._loader_oracle(**inputs)
    dr = fd.Builder().with_modules(module).build()
    n = len(next(iter(expected.values())))
    if n == 0:
        loader = dr.dataloader(module.LOADER_OUTPUTS, inputs=inputs, batch_size=7, num_workers=workers)
        assert [b for b in loader] == []
        return
    loader = dr.dataloader(module.LOADER_OUTPUTS, inputs=inputs, batch_size=7, num_workers=workers)
    got: dict[str, list[Any]] = {k: [] for k in module.LOADER_OUTPUTS}
    for batch in loader:
        for k in module.LOADER_OUTPUTS:
            got[k] += _flatten(batch[k])
    assert got == expected
