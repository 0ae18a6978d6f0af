"""The combination matrix's Ray rows: the statistics pass on a ``RayExecutor`` (a local Ray,
``ray.init(num_cpus=2)``, started once for this file). Run in the Ray stage of
scripts/test.sh, in a pytest process of its own; the oracles are those of
:mod:`tests.conformance.matrix`.

A small slice, not a covering design: one row per way the pass reads its source on the
executor (an index in chunks, a stream read here and computed there, shards read where
they are computed, a stream that cannot travel, a chained group), crossed with workers,
ranks, the caches, resume and shuffle so that each of those values meets Ray once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import flowdata as fd  # noqa: E402
from tests.conformance.matrix import Row, run_row  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.procs, pytest.mark.filterwarnings("ignore:This DataLoader will create")]

R = "ray"
#        kind              executor workers ranks cache  resume shuffle
ROWS = [
    Row("list",            R, 0, 2, True,  True,  False),
    Row("generator",       R, 2, 1, False, False, True),
    Row("stream",          R, 2, 2, False, True,  True),
    Row("sharded",         R, 2, 1, True,  True,  True),
    Row("sharded_lambda",  R, 0, 1, False, False, False),
    Row("chained",         R, 0, 1, True,  False, False),
]


@pytest.fixture(scope="module")
def executor() -> Iterator[fd.RayExecutor]:
    ray.init(num_cpus=2)
    ex = fd.RayExecutor()
    try:
        yield ex
    finally:
        ex.close()
        ray.shutdown()


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ROWS])
def test_a_combination_on_ray_agrees_with_inline(row: Row, tmp_path: Path, executor: fd.RayExecutor) -> None:
    run_row(row, tmp_path, executor)
