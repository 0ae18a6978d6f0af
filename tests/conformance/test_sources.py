"""The Source suite: what every kind of source must do, through the public API.

Parametrised over :data:`tests.conformance.kinds.KINDS` (a list, an Arrow table, a
generator index, a ``datasets.Dataset``, a plain stream, a ``Sequential`` source, a ``datasets.IterableDataset`` in
shards, with and without a lambda, a chained group), as the executor suite is over the
executors: a new source adapter passes this suite by joining that table with one row.

The contract: every item delivered exactly once, in sample order (a stream in shards: per
consumer, the documented exception); a fingerprint that is stable (the same data in a new
object, and in a new process, hits the pass cache) and sees the data (changed data misses);
``len`` and ``dataset()[i]`` where the kind is indexed, a clear "no length" where it
streams; and errors that name the node, the item, and where a read failed, the source.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import flowdata as fd
from tests.conformance.kinds import BAD, BATCH, KINDS, N, SourceKind, rows, survivors

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
kinds = pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)


def _keys(loader: Any) -> list[int]:
    return [int(v) for b in loader for v in b["key"]]


@kinds
def test_execute_delivers_every_item_once_in_sample_order(kind: SourceKind) -> None:
    got = kind.driver().execute(["listed"], inputs=kind.inputs())["listed"]
    assert got == list(range(N))


@kinds
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.procs)])
def test_the_loader_delivers_every_item_once(kind: SourceKind, workers: int) -> None:
    loader = kind.driver().dataloader(["key"], inputs=kind.inputs(), batch_size=BATCH, num_workers=workers,
                                      **kind.options)
    got = _keys(loader)
    assert sorted(got) == list(range(N))
    if not kind.lanes or workers == 0:
        # one consumer reads everything in order; lanes of shards come lane after lane
        # (docs/huggingface.md, "Resuming": in which order)
        assert got == list(range(N))


@kinds
def test_the_same_data_is_a_pass_cache_hit_and_changed_data_a_miss(kind: SourceKind, tmp_path: Path) -> None:
    dr = kind.driver()

    def stats(data_rows: list[dict[str, Any]]) -> tuple[dict[str, int], Any]:
        report = fd.Report()
        got = dr.execute(["value_stats"], inputs=kind.inputs(data_rows, bad=[]), cache_dir=tmp_path, report=report)
        return dict(report.seen), got["value_stats"]

    cold_seen, cold = stats(rows())
    assert cold_seen.get("row") == N
    warm_seen, warm = stats(rows())  # the same rows in a new object
    if not kind.pass_cached:  # documented: the pass runs every time
        assert warm_seen.get("row") == N
    else:
        assert "row" not in warm_seen, f"the pass ran again over the same data: {warm_seen}"
    assert warm.mean.numpy().tobytes() == cold.mean.numpy().tobytes()
    changed = rows()
    changed[-1] = {"x": 1000}
    other_seen, other = stats(changed)
    assert other_seen.get("row") == N, "changed data was served from the cache"
    assert float(other.mean) != float(cold.mean)


@pytest.mark.procs
def test_fingerprints_are_stable_across_processes(tmp_path: Path) -> None:
    # Issue 26: the pass cache over a datasets.IterableDataset hit only within one process.
    # Every kind fills its own cache_dir here, and one new process asks each again.
    for kind in KINDS:
        kind.driver().execute(["value_stats"], inputs=kind.inputs(bad=[]), cache_dir=tmp_path / kind.name)
    script = """
import json, sys
import flowdata as fd
from tests.conformance.kinds import KINDS
seen = {}
for kind in KINDS:
    report = fd.Report()
    kind.driver().execute(["value_stats"], inputs=kind.inputs(bad=[]), cache_dir=sys.argv[1] + "/" + kind.name,
                          report=report)
    seen[kind.name] = report.seen.get("row", 0)
print(json.dumps(seen))
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    want = {k.name: 0 if k.pass_cached else N for k in KINDS}
    assert seen == want, f"samples computed again in a new process: {seen}"


@kinds
def test_indexed_kinds_have_a_length_and_an_index_streams_say_they_have_none(kind: SourceKind) -> None:
    dr = kind.driver()
    loader = dr.dataloader(["key"], inputs=kind.inputs(), batch_size=BATCH, **kind.options)
    assert loader.streaming is not kind.indexed
    if kind.indexed:
        assert len(loader) == math.ceil(N / BATCH)
        ds = dr.dataset(["key", "out"], inputs=kind.inputs(bad=[]))
        assert len(ds) == N
        assert [ds[i]["key"] for i in (0, 7, N - 1)] == [0, 7, N - 1]
        assert ds[-1] == ds[N - 1] and ds[-N] == ds[0]  # counted from the end, sample_rng included
        for past in (N, -N - 1):  # the same error for every kind, saying how many there are
            with pytest.raises(IndexError, match=rf"sample {past} is out of range: the dataset has {N} samples "
                                                 rf"\(0 to {N - 1}\)"):
                ds[past]
    else:
        with pytest.raises(TypeError, match="a streaming loader has no length: its source is not indexed"):
            len(loader)
        stream = dr.dataset(["key"], inputs=kind.inputs(), streaming=True)
        assert not hasattr(stream, "__len__")
        assert sorted(s["key"] for s in stream) == list(range(N))


@kinds
def test_a_failing_sample_names_the_node_and_the_item(kind: SourceKind) -> None:
    dr = kind.driver()
    item = r"item: \{'x': 5\}"
    with pytest.raises(fd.SampleError, match=rf"node 'value' \(.*nodes\.py:\d+\) failed on sample \d+ .*ValueError: "
                                             rf"bad row 5(.|\n)*{item}"):
        dr.execute(["value_stats"], inputs=kind.inputs())
    loader = dr.dataloader(["key", "value"], inputs=kind.inputs(), batch_size=BATCH, **kind.options)
    with pytest.raises(fd.SampleError, match=rf"node 'value' .*bad row 5(.|\n)*{item}"):
        list(loader)


@kinds
def test_skipped_samples_are_reported_by_item_and_left_out(kind: SourceKind) -> None:
    loader = kind.driver().dataloader(["key", "centered"], inputs=kind.inputs(), batch_size=BATCH,
                                      on_error="skip", **kind.options)
    assert sorted(_keys(loader)) == survivors()
    assert [(s.item, s.node, s.pass_) for s in loader.report.skipped] == [
        (f"{{'x': {b}}}", "value", 1) for b in BAD]


@pytest.mark.parametrize("kind", [k for k in KINDS if k.broken is not None], ids=lambda k: k.name)
def test_a_failing_read_names_the_source_and_the_sample(kind: SourceKind) -> None:
    assert kind.broken is not None
    dr = kind.driver()
    inputs = {"data": kind.broken(rows(), 9), "bad": []}
    with pytest.raises(fd.NodeError, match=r"node 'row' \(.*\w+\.py:\d+\) failed: OSError: cannot read row 9 "
                                           r"\(while producing sample \d+"):
        dr.execute(["listed"], inputs=inputs)
    with pytest.raises(fd.NodeError, match=r"node 'row' .*cannot read row 9 \(while producing sample \d+"):
        list(dr.dataloader(["key"], inputs={"data": kind.broken(rows(), 9), "bad": []}, batch_size=BATCH,
                           **kind.options))
