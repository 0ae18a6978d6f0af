"""The combination matrix: source kind x executor x workers x ranks x sample cache x resume.

Each row runs the pipeline of ``tests/conformance/flows`` through ``dataloader()`` and
checks it against the oracles listed in :mod:`tests.conformance.matrix` (exactly once, the
documented batches, bitwise statistics and values, skips agreed, warm caches, resume at
every batch boundary). Ray rows are in ``test_combinations_ray.py`` (the Ray stage).

How the rows were chosen. The full product (8 kinds x 2^6, shuffle added to the axes of
issue 27) is 512 rows, too slow; the table is a covering design: every pair of values of
any two axes appears in some row (16 rows, the least for 8 kinds x 2). Each kind has two
rows whose binary axes are complements (so each kind meets both values of every other
axis), and the eight "base" rows (the inline ones) were picked so that every pair of
binary axes is equal in one base and differs in another (then the complements give all
four value pairs); ``test_the_table_covers_every_pair`` checks this. Then the rows for
the seams of issue 26, each saying which, and the rows under torch.distributed.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowdata as fd
from tests.conformance.kinds import BATCH, KIND, KINDS, deal, survivors
from tests.conformance.matrix import Row, check_reference, order, run_row

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

I, P = "inline", "processes"
#            kind              executor workers ranks cache  resume shuffle
COVERING = [
    Row("list",            I, 0, 1, False, False, False),
    Row("list",            P, 2, 2, True,  True,  True),
    Row("arrow",           I, 2, 1, True,  False, False),
    Row("arrow",           P, 0, 2, False, True,  True),
    Row("generator",       I, 0, 2, True,  False, True),
    Row("generator",       P, 2, 1, False, True,  False),
    Row("hf_dataset",      I, 2, 2, False, False, True),
    Row("hf_dataset",      P, 0, 1, True,  True,  False),
    Row("stream",          I, 0, 2, False, True,  False),
    Row("stream",          P, 2, 1, True,  False, True),
    # issue 26: a sharded stream resumed at the same worker count kept its batches but not their order
    Row("sharded",         I, 2, 1, False, True,  True),
    Row("sharded",         P, 0, 2, True,  False, False),
    Row("chained",         I, 0, 1, True,  True,  True),
    Row("chained",         P, 2, 2, False, False, False),
    Row("sequential",      I, 2, 2, True,  False, False),
    Row("sequential",      P, 0, 1, False, True,  True),
]
SEAMS = [
    # issue 26: a stream mapped by a lambda, with a statistics pass on workers: PicklingError
    Row("sharded_lambda",  P, 2, 1, False, True,  False),
    Row("sharded_lambda",  I, 2, 2, True,  False, True),
    # issue 26: the sharded stream's resume, with its statistics on the pool and both caches
    Row("sharded",         P, 2, 1, True,  True,  False),
]
ROWS = COVERING + SEAMS


# Rows that fail today, each with why. Strict: the day one passes, it must leave this list.
# Rows that fail today, each with why. Strict: the day one passes, it must leave this list.
XFAIL: dict[str, str] = {}


def _marks(row: Row) -> list[Any]:
    marks: list[Any] = [pytest.mark.procs] if row.workers or row.executor == P else []
    if row.id in XFAIL:
        marks.append(pytest.mark.xfail(strict=True, raises=fd.InputError, reason=XFAIL[row.id]))
    return marks


@pytest.fixture(scope="module")
def pool() -> Iterator[fd.ProcessExecutor]:
    ex = fd.ProcessExecutor(2)
    yield ex
    ex.close()


def test_the_table_covers_every_pair() -> None:
    axes = ["kind", "executor", "workers", "ranks", "cache", "resume", "shuffle"]
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


# Real ranks: 2 processes in a gloo process group (tests/conformance/dist_main.py), rank and
# world size read from torch.distributed, so the statistics pass is shared and a stream in
# shards is evened out as it goes. One launcher process runs every row (torch imported once).
DIST = [
    Row("list",            I, 0, 2, False, True,  True),
    Row("generator",       P, 0, 2, True,  False, False),
    Row("stream",          I, 2, 2, False, True,  True),
    Row("sharded",         I, 2, 2, True,  True,  True),
    Row("hf_dataset",      P, 2, 2, False, True,  False),
    Row("sequential",      I, 2, 2, False, True,  False),
]


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dist")
    _launch(root, DIST)
    # A row whose rank died natively or hung (no result, or its peer's "stopped without
    # reporting an error") met a known hazard outside flowdata's logic: a DataLoader worker
    # forked while torch's gloo threads run can stay stuck inside fork() (seen about once in
    # a few hundred runs; its stacks are in the logs). Such a row runs once more, alone; its
    # first attempt's logs are kept beside it and named in a warning. Any other error fails.
    died = [r for r in DIST if _native_death(root / r.id, r.ranks)]
    if died:
        again = tmp_path_factory.mktemp("dist-again")
        _launch(again, died)
        for r in died:
            shutil.move(str(root / r.id), str(root / f"{r.id}.first-attempt"))
            shutil.move(str(again / r.id), str(root / r.id))
        warnings.warn(f"torch.distributed rows run again after a rank died or hung: {[r.id for r in died]}; "
                      f"the first attempts' logs are in {root}", stacklevel=1)
    return root


def _launch(root: Path, rows: list[Row]) -> None:
    listed = root / "rows.json"
    listed.write_text(json.dumps([dataclasses.asdict(r) for r in rows]))
    # PYTHONFAULTHANDLER: a process of a rank started by spawn dumps its stacks too, if it hangs
    done = subprocess.run([sys.executable, "-m", "tests.conformance.dist_main", str(root), str(listed)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"})
    assert done.returncode == 0, done.stderr[-3000:]


def _native_death(out: Path, ranks: int) -> bool:
    """Whether a rank of the row wrote no result, or one saying a peer stopped without an error."""
    for r in range(ranks):
        file = out / f"rank{r}.json"
        if not file.exists() or "stopped without reporting an error" in json.loads(file.read_text()).get("error", ""):
            return True
    return False


def _logs(out: Path, ranks: int, tail: int = 12000) -> str:
    """Every rank's log, its end: what the rank printed, and, when it hung, the stacks of its
    threads and of its DataLoader workers (tests/conformance/dist_main.py)."""
    parts = []
    for r in range(ranks):
        log = out / f"rank{r}.log"
        parts.append(f"--- rank {r}'s log ({log}) ---\n{log.read_text(errors='replace')[-tail:] if log.exists() else ''}")
    return "\n".join(parts)


@pytest.mark.procs
@pytest.mark.dist
@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in DIST])
def test_a_combination_under_torch_distributed_agrees_with_inline(row: Row, launched: Path) -> None:
    ranks = []
    out = launched / row.id
    for r in range(row.ranks):
        file = out / f"rank{r}.json"
        assert file.exists(), f"rank {r} wrote nothing (killed at the launcher's timeout?)\n{_logs(out, row.ranks)}"
        got = json.loads(file.read_text())
        assert "error" not in got, f"rank {r}: {got.get('traceback', '')}\n{_logs(out, row.ranks)}"
        ranks.append(got)
    delivered = [s[0] for got in ranks for b, pad in zip(got["batches"], got["padding"], strict=True)
                 for s in b[:len(b) - pad]]
    assert sorted(delivered) == survivors(), "not every surviving row exactly once across the ranks"
    # even batches, streams in shards included: every rank the same number of batches of the same sizes
    assert len({tuple(len(b) for b in got["batches"]) for got in ranks}) == 1
    if not KIND[row.kind].lanes:
        for r, got in enumerate(ranks):
            want = deal(list(order(row.kind, row.shuffle)), r, row.ranks, BATCH, streaming=not KIND[row.kind].indexed)
            assert [[s[0] for s in b] for b in got["batches"]] == [b for b, _ in want]
            assert got["padding"] == [p for _, p in want]
