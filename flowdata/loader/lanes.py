"""A stream in shards: lanes, each read by one consumer, and its dataset (:class:`LaneDataset`).

A source in shards (:class:`~flowdata.run.sources.sharded.ShardedSource`, e.g. a
``datasets.IterableDataset``) is streamed by ``world_size x max(1, num_workers)``
*consumers* (a DataLoader worker of one rank). At the start of an epoch the shards are put
in order (seeded by (seed, epoch) when ``shuffle``) and dealt into one **lane** per
consumer:

- at least as many shards as consumers: lane ``c`` reads shards ``c, c + C, ...`` of that
  order, whole -- each shard is opened once per epoch in all, by the consumer that serves it;
- fewer shards than consumers (1 shard, 4 consumers): lane ``c`` reads shard ``c % S`` and
  keeps every ``k``-th of its rows from row ``c // S`` on, ``k`` being the number of lanes
  on that shard. Every row is still delivered once; a shard is read ``k`` times (the loader
  says so once, in a log line).

Lane ``c`` belongs to rank ``c % world_size``; a rank's lanes are dealt to its workers in
turn. A lane passes its rows through its own seeded shuffle buffer and cuts them into
batches (a batch never mixes lanes; each lane's last batch may be partial, and
``drop_last`` drops it). Because a lane's batches depend only on (seed, epoch, lane), the
position of an epoch is the number of batches served of each lane: a resumed loader --
with any ``num_workers`` -- deals the saved lanes to its workers and skips those batches
by replaying only the rows' bookkeeping, buffer included.

torch asks a loader's workers in turn, from worker 0, skipping those whose stream has
ended; a worker serving several lanes takes them in turn too. So an epoch's batches come
lane after lane in the order of the lanes' numbers, a lane that has ended left out. The
position therefore also holds the lane of the last batch served; a resumed loader deals
the lanes from the one after it (:func:`resumed`), so that with the same number of
workers (or 0 or 1 worker, or at least as many workers as lanes) the batches come in
exactly the uninterrupted order. With another number, a worker serving two lanes goes on
alternating them after a third lane has ended: exactly the remaining batches come, but
once a lane ends in another order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch.utils.data import get_worker_info

from flowdata.discover import Program
from flowdata.errors import FlowdataError, describe
from flowdata.loader.datasets import StreamWork
from flowdata.loader.order import EpochOrder, _shuffled, cut_batches
from flowdata.loader.position import count
from flowdata.loader.wire import Batch
from flowdata.run import PassSpec, ShardedSource
from flowdata.sample import sample_seed

__all__ = ["Lane", "LaneDataset", "Slice", "lane_batches", "layout", "resumed", "saved_lanes"]


@dataclass(frozen=True)
class Slice:
    """Rows ``offset, offset + step, ...`` of one shard."""

    shard: int
    step: int = 1
    offset: int = 0


@dataclass(frozen=True)
class Lane:
    """What one consumer reads in an epoch: slices of shards, in order."""

    number: int
    slices: tuple[Slice, ...]

    def to_state(self) -> list[list[int]]:
        """Plain data, for ``state_dict()``."""
        return [[s.shard, s.step, s.offset] for s in self.slices]

    @classmethod
    def from_state(cls, number: int, state: list[list[int]]) -> Lane:
        """The lane of ``to_state()``."""
        return cls(number, tuple(Slice(int(a), int(b), int(c)) for a, b, c in state))


def layout(num_shards: int, consumers: int, order: EpochOrder) -> list[Lane]:
    """The lanes of an epoch for ``consumers`` consumers in all (see the module docstring)."""
    shards = list(range(num_shards))
    if order.shuffle:
        random.Random(sample_seed(order.seed, order.epoch, -5)).shuffle(shards)
    if num_shards >= consumers:
        return [Lane(c, tuple(Slice(shards[k]) for k in range(c, num_shards, consumers))) for c in range(consumers)]
    return [Lane(c, (Slice(shards[c % num_shards], len(range(c % num_shards, consumers, num_shards)),
                           c // num_shards),)) for c in range(consumers)]


def lane_batches(
    source: ShardedSource, lane: Lane, order: EpochOrder, exclude: frozenset[int] = frozenset()
) -> Iterator[tuple[int, list[int], list[Any]]]:
    """One lane's batches, ``(number in the lane, indices, items)``, not computed."""
    pairs: Iterator[tuple[int, Any]] = (
        p for s in lane.slices for p in source.rows(s.shard, s.step, s.offset) if p[0] not in exclude)
    if order.shuffle:
        rng = random.Random(sample_seed(sample_seed(order.seed, order.epoch, -6), lane.number, -7))
        pairs = _shuffled(pairs, order.shuffle_buffer, rng)
    return cut_batches(pairs, order.batch_size, order.drop_last)


def interleaved(streams: list[Iterator[Any]]) -> Iterator[Any]:
    """The streams' elements in turn, one from each, until all end."""
    live = list(streams)
    while live:
        for s in list(live):
            x = next(s, _END)
            if x is _END:
                live.remove(s)
            else:
                yield x


_END = object()


def resumed(lanes: list[Lane], last: int | None) -> list[Lane]:
    """A rank's lanes in the order its workers take them on a resume: by number, from the one
    after ``last`` (the lane of the last batch served, None: from the first) on, cyclically."""
    ordered = sorted(lanes, key=lambda lane: lane.number)
    at = next((k + 1 for k, lane in enumerate(ordered) if lane.number == last), 0) % max(1, len(ordered))
    return ordered[at:] + ordered[:at]


def served_of(state: Mapping[Any, Any]) -> dict[int, int]:
    """Batches served per lane, from ``state_dict()``'s plain data (JSON keys are strings)."""
    return {int(k): int(v) for k, v in state.items()}


def saved_lanes(state: Mapping[str, Any], served: int) -> tuple[list[Lane], dict[int, int], int | None]:
    """The lanes (in the order the workers take them), their served batches and the lane
    of the last batch served, of a stream in shards' ``state_dict()`` whose lanes served
    ``served`` batches."""
    try:
        lanes = [Lane.from_state(int(k), v) for k, v in state["lanes"].items()]
        done = served_of(state["lane_batches"])
        if sum(done.values()) != served or not set(done) <= {lane.number for lane in lanes}:
            raise ValueError("the batches served of each lane do not add up")
        last = state.get("last_lane")  # absent from a state saved before it was kept
        if last is not None and not done.get(int(last)):
            raise ValueError(f"the last batch came from lane {last!r}, which served none")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FlowdataError(
            f"cannot resume: the saved position of the stream in shards is incomplete or impossible ({exc})\n"
            "  fix: pass a state_dict() of a flowdata.DataLoader as it was saved"
        ) from None
    return resumed(lanes, None if last is None else int(last)), done, None if last is None else int(last)


class LaneDataset(StreamWork):
    """A streaming pass over a source in shards: each consumer reads its own lanes
    (see :mod:`flowdata.loader.lanes`); nothing is read in the main process.

    ``data`` is what the source returned (a ``datasets.IterableDataset``, ...), pickled to
    the workers, each of which reads only its lanes' shards; ``workers`` is the number of
    DataLoader workers per rank that read it (the lanes of an epoch are laid out for
    ``max(1, workers)`` consumers per rank); the other arguments are :class:`StreamWork`'s
    (``shuffle`` also shuffles the shard order, each lane has its own buffer,
    ``drop_last`` drops each lane's last incomplete batch). Its position is, besides the
    batches served, the lanes of the epoch, the batches served of each, and the lane of
    the last batch served.
    """

    def __init__(self, program: Program, spec: PassSpec, whole: Mapping[str, Any], outputs: Sequence[str],
                 data: Any, order: EpochOrder, *, workers: int = 0, **options: Any):
        super().__init__(program, spec, whole, outputs, order, **options)
        nodes = options.get("nodes")
        if nodes is not None:  # the workers read the stream, not the source's inputs
            read = {p.name for name in spec.computes for p in nodes[name].params}
            self.context.whole = {k: v for k, v in self.whole.items() if k in read}
        self.data = data
        self.num_shards = int(data.num_shards)
        self.workers = workers
        self._lanes: list[Lane] | None = None  # this rank's lanes when resumed, else from the worker count
        self._done: dict[int, int] = {}  # batches of each lane served before a resume
        self._lane_served: dict[int, int] = {}  # batches of each lane served this epoch
        self._last_lane: int | None = None  # the lane of the last batch served (see lanes.resumed)

    def identity(self) -> dict[str, Any]:
        return {"num_shards": self.num_shards, **super().identity()}

    def delivered(self, batch: Batch) -> None:
        super().delivered(batch)
        if batch.lane is not None:  # not a batch that only repeats rows to even out the ranks
            self._lane_served[batch.lane] = self._lane_served.get(batch.lane, 0) + 1
            self._last_lane = batch.lane

    def _where(self) -> dict[str, Any]:
        # The layout is saved too, so that any number of workers can take the lanes over.
        lanes = self._lanes if self._lanes is not None else self.rank_lanes(max(1, self.workers))
        where: dict[str, Any] = {
            "lanes": {str(lane.number): lane.to_state() for lane in lanes},
            "lane_batches": {str(k): v for k, v in sorted(self._lane_served.items())},
            "last_lane": self._last_lane,  # where the next batch comes from (see lanes.resumed)
        }
        padding = self.served - sum(self._lane_served.values())
        if padding:  # batches that only repeat rows (evened out): no lane served them
            where["padding_batches"] = padding
        return where

    def _begin(self, order: EpochOrder, served: int, saved: Mapping[str, Any]) -> None:
        lanes: list[Lane] | None = None
        done: dict[int, int] = {}
        last: int | None = None
        if served:
            padding = saved.get("padding_batches", 0)
            if not count(padding) or padding > served:
                raise FlowdataError(
                    f"cannot resume: the saved position of the stream in shards is impossible (padding_batches "
                    f"{padding!r} of batches_served {served!r})\n"
                    "  fix: pass a state_dict() of a flowdata.DataLoader as it was saved")
            lanes, done, last = saved_lanes(saved, served - padding)
        self._lanes, self._done, self._lane_served, self._last_lane = lanes, dict(done), dict(done), last

    def unpicklable(self) -> str | None:
        """As :meth:`PassWork.unpicklable`, the stream itself first."""
        import pickle

        try:
            pickle.dumps(self.data)
        except Exception as exc:
            return (
                f"source '{self.spec.group}' returned a {type(self.data).__name__} that cannot be pickled: "
                f"{describe(exc)}\n  fix: give the stream's map() and filter() module-level functions (not "
                "lambdas or local functions)"
            )
        return super().unpicklable()

    def rank_lanes(self, consumers_per_rank: int) -> list[Lane]:
        """This rank's lanes of the epoch, for ``consumers_per_rank`` consumers on every rank."""
        o = self.order
        every = layout(self.num_shards, o.world_size * consumers_per_rank, o)
        return [lane for lane in every if lane.number % o.world_size == o.rank]

    def _lane(self, source: ShardedSource, lane: Lane) -> Iterator[Batch]:
        skip = self._done.get(lane.number, 0)
        held = 0
        for n, indices, items in lane_batches(source, lane, self.order, self.exclude):
            held = n + 1
            if n < skip:
                continue  # served before the resume: not computed
            batch = self._compute(indices, items)
            batch.lane = lane.number
            yield batch
        if held < skip:  # a lane's shards are read only here, so its position is checked here
            raise FlowdataError(
                f"cannot resume: the saved position is impossible (lane {lane.number} of the stream of source "
                f"'{self.spec.group}' served {skip} batches of epoch {self.order.epoch}, but it holds {held})\n"
                "  fix: pass a state_dict() of a flowdata.DataLoader as it was saved, over the same data"
            )

    def _computed(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        lanes = self._lanes if self._lanes is not None else self.rank_lanes(workers)
        source = ShardedSource(self.nodes[self.spec.group], self.data)
        return interleaved([self._lane(source, lane) for j, lane in enumerate(lanes) if j % workers == worker])
