"""The same Hamilton-style module through Hamilton's own driver and through flowdata."""

from __future__ import annotations

from typing import Any

import pytest

import flowdata as fd
from tests.dataflows import hamilton_style


def _hamilton(outputs: list[str], inputs: dict[str, Any]) -> dict[str, Any]:
    from hamilton import driver
    from hamilton.execution.executors import SynchronousLocalTaskExecutor

    dr = (
        driver.Builder()
        .with_modules(hamilton_style)
        .enable_dynamic_execution(allow_experimental_mode=True)
        .with_local_executor(SynchronousLocalTaskExecutor())
        .build()
    )
    return dict(dr.execute(outputs, inputs=inputs))


@pytest.mark.parametrize("case", range(len(hamilton_style.CASES)))
def test_same_results_as_hamilton(case: int) -> None:
    inputs = hamilton_style.CASES[case]
    outputs = hamilton_style.OUTPUTS
    # Hamilton 1.90 fails with two Collect nodes over one Parallelizable (its issue #742),
    # so it computes one output per run; flowdata computes them together in one pass.
    theirs: dict[str, Any] = {}
    for output in outputs:
        theirs.update(_hamilton([output], inputs))
    ours = fd.Builder().with_modules(hamilton_style).build().execute(outputs, inputs=inputs)
    assert ours == theirs == hamilton_style._oracle(**inputs)
