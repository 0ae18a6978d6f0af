"""The runner of the combination matrix: one row, run through the public API, against its oracles.

A row names a source kind, the executor of the statistics pass, the DataLoader workers,
the ranks (given by hand, one loader per rank in this process), the sample cache, and
whether to resume at every batch boundary. :func:`run_row` builds each rank's loader over
the pipeline of ``tests/conformance/flows`` (Welford statistics over a per-sample value,
two rows that fail under ``on_error="skip"``, a cached node that reads the statistics, an
augmentation from ``sample_rng``) and checks:

- **exactly once**: every surviving row delivered once per epoch across the ranks, the
  rows that even out the ranks (``loader.padding(b)``) aside;
- **same batches as inline**: the plain-Python deal of docs/training.md ("Ranks: even
  batches", "Streaming"); for a stream in shards, the batches of the inline loader at the
  same ``world_size x num_workers``, the documented exception (docs/huggingface.md, "What
  is split how": batches are laid out per consumer);
- **bitwise statistics and values**: ``loader.stats`` and every delivered value equal to
  the kind's inline reference bit for bit;
- **skips agreed**: every loader reports the same skips as the reference;
- **the caches**: a second loader is served by the pass cache and the sample cache (no
  miss, no pass) and delivers the same bits;
- **resume**: for every k, the state after k batches loaded into a new loader gives
  exactly the rest of the epoch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import flowdata as fd
from tests.conformance.kinds import BATCH, KIND, N, SourceKind, deal, survivors
from tests.conformance.flows.nodes import OFFSET, SCALE

OUTPUTS = ["key", "centered", "out"]
CACHED = ["value", "centered"]
Sample = tuple[int, str, str]  # key, centered and out as float.hex(): compared bit for bit


@dataclass(frozen=True)
class Row:
    """One combination. ``executor``: "inline", "processes" or "ray" (the statistics pass)."""

    kind: str
    executor: str
    workers: int
    ranks: int
    cache: bool
    resume: bool
    shuffle: bool = False

    @property
    def id(self) -> str:
        return (f"{self.kind}-{self.executor}-w{self.workers}-r{self.ranks}"
                f"-{'cache' if self.cache else 'nocache'}-{'resume' if self.resume else 'once'}"
                f"{'-shuffle' if self.shuffle else ''}")


@dataclass
class Epoch:
    """What one loader delivered: batches, padding per batch, and its state after k batches."""

    batches: list[list[Sample]]
    padding: list[int]
    states: list[dict[str, Any]]
    loader: Any

    def rows(self) -> int:
        return sum(len(b) for b in self.batches)


def stats_bytes(stats: Any) -> bytes:
    return b"".join(getattr(stats, f).numpy().tobytes() for f in ("mean", "var", "min", "max", "count"))


def skips(report: fd.Report) -> list[tuple[Any, ...]]:
    return [(s.index, s.item, s.node, s.error, s.group, s.pass_) for s in report.skipped]


def loader(kind: SourceKind, executor: Any, workers: int, rank: int | None = 0, world_size: int | None = 1,
           cache_dir: Path | None = None, shuffle: bool = False) -> Any:
    """The row's loader; ``rank=None, world_size=None`` reads them from torch.distributed.

    A shuffle buffer of 8 rows (of 23): a stream's order depends on it.
    """
    cached: dict[str, Any] = {"cache_dir": cache_dir, "cache": CACHED} if cache_dir is not None else {}
    return driver(kind.name).dataloader(
        OUTPUTS, inputs=kind.inputs(), batch_size=BATCH, num_workers=workers, on_error="skip", executor=executor,
        rank=rank, world_size=world_size, shuffle=shuffle, shuffle_buffer=8, seed=0, **cached, **kind.options)


def epoch(ld: Any, state: dict[str, Any] | None = None) -> Epoch:
    """Iterates ``ld`` once (from ``state`` when given), keeping its state after each batch."""
    start = 0
    if state is not None:
        ld.load_state_dict(state)
        start = state["batches_served"]  # padding(b) counts the batches of the whole epoch
    out = Epoch([], [], [ld.state_dict()], ld)
    for b, batch in enumerate(ld, start):
        keys = [int(k) for k in batch["key"]]
        out.batches.append([(k, float(c).hex(), float(o).hex())
                            for k, c, o in zip(keys, batch["centered"].tolist(), batch["out"].tolist(), strict=True)])
        out.padding.append(ld.padding(b))
        out.states.append(ld.state_dict())
    return out


@cache
def driver(name: str) -> fd.Driver:
    return KIND[name].driver()


@cache
def reference(name: str) -> tuple[dict[int, Sample], bytes, tuple[tuple[Any, ...], ...]]:
    """The kind's inline run (no workers, one rank, no cache): values by key, statistics, skips."""
    ep = epoch(loader(KIND[name], "inline", 0))
    values = {s[0]: s for b in ep.batches for s in b}
    return values, stats_bytes(ep.loader.stats["value_stats"]), tuple(skips(ep.loader.report))


@cache
def order(name: str, shuffle: bool) -> tuple[int, ...]:
    """The epoch's order: the keys of the inline run (no workers, one rank), batch after batch.

    Shuffled, it is the permutation (an index) or the shuffle buffer's order (a stream) that
    every rank and worker count must deal as docs/training.md says.
    """
    return tuple(s[0] for b in epoch(loader(KIND[name], "inline", 0, shuffle=shuffle)).batches for s in b)


@cache
def lane_batches(name: str, workers: int, world_size: int, shuffle: bool) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per rank, the keys of each batch of the inline loader at this ``world_size x num_workers``."""
    return tuple(tuple(tuple(s[0] for s in b)
                       for b in epoch(loader(KIND[name], "inline", workers, r, world_size, shuffle=shuffle)).batches)
                 for r in range(world_size))


def check_reference(name: str) -> None:
    """The reference against plain Python and against ``execute()``."""
    values, stats, skipped = reference(name)
    kind = KIND[name]
    alive = survivors()
    assert sorted(values) == alive
    mean = statistics.fmean(x * SCALE + OFFSET for x in alive)
    for key, centered, out in values.values():
        assert math.isclose(float.fromhex(centered), key * SCALE + OFFSET - mean, abs_tol=1e-6)
        assert 0 <= float.fromhex(out) - float.fromhex(centered) < 1
    assert list(order(name, False)) == alive, "unshuffled, the epoch is not in sample order"
    assert sorted(order(name, True)) == alive and list(order(name, True)) != alive
    run = driver(name).execute(["value_stats"], inputs=kind.inputs(), on_error="skip")
    assert stats_bytes(run["value_stats"]) == stats, "the loader's statistics differ from execute()'s"
    assert [(s[1], s[2], s[5]) for s in skipped] == [(f"{{'x': {b}}}", "value", 1) for b in (5, 17)]


def run_row(row: Row, tmp_path: Path, executor: Any) -> None:
    kind = KIND[row.kind]
    values, stats, skipped = reference(row.kind)
    cache_dir = tmp_path / "cache" if row.cache else None
    epochs = []
    for rank in range(row.ranks):
        def make() -> Any:
            return loader(kind, executor, row.workers, rank, row.ranks, cache_dir, row.shuffle)

        first = epoch(make())
        _check_loader(first, stats, skipped, values, f"rank {rank}")
        if row.cache and rank == 0:
            counts = first.loader.report.cache
            assert counts["value"]["misses"] == len(survivors()), f"cold cache counts {counts}"
        if row.cache:
            warm = epoch(make())
            _check_loader(warm, stats, skipped, values, f"rank {rank}, warm")
            assert (warm.batches, warm.padding) == (first.batches, first.padding), "a warm loader delivered other bits"
            counts = warm.loader.report.cache
            assert all(counts[n]["misses"] == 0 for n in CACHED), f"warm cache counts {counts}"
            assert counts["centered"]["hits"] == warm.rows(), f"warm cache counts {counts}"
            if kind.pass_cached:  # the statistics came from the pass cache: no sample of pass 1 ran
                assert warm.loader.report.seen.get("row") == warm.rows(), warm.loader.report.seen
        if row.resume:
            for k, state in enumerate(first.states):
                rest = epoch(make(), state)
                _check_loader(rest, stats, skipped, values, f"rank {rank}, resumed after {k} batches")
                assert (rest.batches, rest.padding) == (first.batches[k:], first.padding[k:]), (
                    f"rank {rank}, resumed after {k} of {len(first.batches)} batches: another remainder")
        epochs.append(first)

    delivered = [s[0] for ep in epochs for b, pad in zip(ep.batches, ep.padding, strict=True) for s in b[:len(b) - pad]]
    assert sorted(delivered) == survivors(), "not every surviving row exactly once"
    for rank, ep in enumerate(epochs):
        keys = [[s[0] for s in b] for b in ep.batches]
        if kind.lanes:
            assert keys == [list(b) for b in lane_batches(row.kind, row.workers, row.ranks, row.shuffle)[rank]]
            if row.ranks == 1 and row.workers == 0:
                assert keys == [b for b, _ in deal(list(order(row.kind, row.shuffle)), 0, 1, BATCH, streaming=True)]
        else:
            want = deal(list(order(row.kind, row.shuffle)), rank, row.ranks, BATCH, streaming=not kind.indexed)
            assert keys == [b for b, _ in want], f"rank {rank}: batches other than the documented deal"
            assert ep.padding == [p for _, p in want], f"rank {rank}: padding other than the documented deal"
    if not kind.lanes:  # even batches: every rank the same number of batches of the same sizes
        assert len({tuple(len(b) for b in ep.batches) for ep in epochs}) == 1


def _check_loader(ep: Epoch, stats: bytes, skipped: tuple[tuple[Any, ...], ...], values: dict[int, Sample],
                  where: str) -> None:
    assert stats_bytes(ep.loader.stats["value_stats"]) == stats, f"{where}: statistics differ from inline's bits"
    assert tuple(skips(ep.loader.report)) == skipped, f"{where}: skips reported otherwise than inline"
    for b in ep.batches:
        for s in b:
            assert s == values[s[0]], f"{where}: row {s[0]} has other bits than inline's"
