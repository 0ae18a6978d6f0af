"""The combination matrix: source kind x executor x workers x ranks x sample cache x resume.

Each row runs the pipeline of ``tests/conformance/flows`` through ``dataloader()`` and
checks it against the oracles listed in :mod:`tests.conformance.matrix` (exactly once, the
documented batches, bitwise statistics and values, skips agreed, warm caches, resume at
every batch boundary). Ray rows are in ``test_combinations_ray.py`` (the Ray stage).

How the rows were chosen. The full product (8 kinds x 2^5) is 256 rows, too slow; the
table is a covering design: every pair of values of any two axes appears in some row.
Each kind has two rows whose binary axes are complements (so each kind meets both values
of every other axis), and the seven "base" vectors (executor, workers, ranks, cache,
resume) were picked so that every pair of binary axes is equal in one base and differs in
another (then the complements give all four value pairs); ``test_the_table_covers_every_pair``
checks this. Then the rows for the seams of issue 26, each saying which.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowdata as fd
from tests.conformance.kinds import KINDS
from tests.conformance.matrix import Row, check_reference, run_row

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

I, P = "inline", "processes"
#            kind              executor workers ranks cache  resume
COVERING = [
    Row("list",            I, 0, 1, False, False),
    Row("list",            P, 2, 2, True,  True),
    Row("arrow",           I, 2, 1, True,  False),
    Row("arrow",           P, 0, 2, False, True),
    Row("generator",       I, 0, 2, True,  False),
    Row("generator",       P, 2, 1, False, True),
    Row("hf_dataset",      I, 2, 2, False, False),
    Row("hf_dataset",      P, 0, 1, True,  True),
    Row("stream",          I, 0, 2, False, True),
    Row("stream",          P, 2, 1, True,  False),
    # issue 26: a sharded stream resumed at the same worker count kept its batches but not their order
    Row("sharded",         I, 2, 1, False, True),
    Row("sharded",         P, 0, 2, True,  False),
    Row("chained",         I, 0, 1, True,  True),
    Row("chained",         P, 2, 2, False, False),
]
SEAMS = [
    # issue 26: a stream mapped by a lambda, with a statistics pass on workers: PicklingError
    Row("sharded_lambda",  P, 2, 1, False, True),
    Row("sharded_lambda",  I, 2, 2, True,  False),
    # issue 26: the sharded stream's resume, with its statistics on the pool and both caches
    Row("sharded",         P, 2, 1, True,  True),
]
ROWS = COVERING + SEAMS


def _marks(row: Row) -> list[Any]:
    return [pytest.mark.procs] if row.workers or row.executor == P else []


@pytest.fixture(scope="module")
def pool() -> Iterator[fd.ProcessExecutor]:
    ex = fd.ProcessExecutor(2)
    yield ex
    ex.close()


def test_the_table_covers_every_pair() -> None:
    axes = ["kind", "executor", "workers", "ranks", "cache", "resume"]
    values = {a: {getattr(r, a) for r in COVERING} for a in axes}
    assert values["kind"] == {k.name for k in KINDS} - {"sharded_lambda"}
    for a, b in itertools.combinations(axes, 2):
        seen = {(getattr(r, a), getattr(r, b)) for r in COVERING}
        assert seen == set(itertools.product(values[a], values[b])), (a, b)


@pytest.mark.parametrize("kind", [k.name for k in KINDS])
def test_the_inline_reference_agrees_with_plain_python(kind: str) -> None:
    check_reference(kind)


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id, marks=_marks(r)) for r in ROWS])
def test_a_combination_agrees_with_inline(row: Row, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    executor = request.getfixturevalue("pool") if row.executor == P else row.executor
    run_row(row, tmp_path, executor)
