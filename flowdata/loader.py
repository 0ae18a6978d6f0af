"""The training iterator: a group's per-sample work inside torch DataLoader workers.

Pieces, each small:

- :class:`EpochBatches` decides, in the main process, which samples go in which batch:
  a permutation seeded by (seed, epoch), sharded across ranks, cut into batches. It is the
  only source of order, so batches are identical for any number of workers, and a resumed
  loader starts at batch ``k`` without computing the ``k`` batches before it.
- :class:`PassDataset` is the torch ``Dataset``: it holds the item index, the pass to run
  and the whole values it reads (statistics included), and computes a *whole batch* per
  call (``__getitems__``), column by column, in the worker. It pickles as plain data and
  rebuilds the nodes from module names and config, so it works under ``spawn``.
- :class:`DataLoader` is a ``torch.utils.data.DataLoader`` subclass that unwraps batches,
  raises failures with their context, keeps the report, and saves/restores its position.

Transport: one message per batch (the collated batch plus its report), never one per
sample.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import Dataset, Sampler, get_worker_info
from torch.utils.data._utils.collate import default_collate

from flowdata.chunk import Failure, PassSpec, run_chunk
from flowdata.discover import Program, load_program
from flowdata.errors import FlowdataError, SampleError, describe
from flowdata.index import ArrowIndex, SequenceIndex
from flowdata.node import Node
from flowdata.report import Report, Skip
from flowdata.sample import sample_seed

__all__ = ["Batch", "DataLoader", "EpochBatches", "PassDataset"]

_log = logging.getLogger("flowdata")


class _Indices(list[int]):
    """A batch's sample indices, carrying the epoch to the worker (for ``sample_rng``)."""

    epoch: int = 0


class EpochBatches(Sampler[list[int]]):
    """Which samples form each batch of an epoch, for one rank.

    Every epoch, the sample indices (minus those skipped in earlier passes) are permuted
    with a generator seeded from (seed, epoch) when ``shuffle``, then dealt to ranks in
    turn (rank ``r`` takes positions ``r, r + world_size, ...``), then cut into batches.
    Every sample appears exactly once per epoch across ranks; ranks differ by at most one
    sample (so by at most one batch). ``drop_last`` drops the last ``len % (batch_size *
    world_size)`` samples of the permutation, so that every rank gets the same number of
    full batches.
    """

    def __init__(
        self,
        indices: Sequence[int],
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ):
        if batch_size < 1:
            raise FlowdataError(f"batch_size={batch_size}: expected a positive number")
        if not 0 <= rank < world_size:
            raise FlowdataError(f"rank={rank} is not in range for world_size={world_size}")
        self.indices = torch.as_tensor(list(indices), dtype=torch.int64)
        self._contiguous = bool(torch.equal(self.indices, torch.arange(len(self.indices))))
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.epoch = 0
        self.start = 0  # first batch of the next iteration (resume)

    def _mine(self) -> torch.Tensor:
        order = self.indices
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(sample_seed(self.seed, self.epoch, -1))
            perm = torch.randperm(len(order), generator=g)
            # With no sample skipped the indices are 0..n-1 and the permutation is the order.
            order = perm if self._contiguous else order[perm]
        if self.drop_last:
            # Every rank gets the same number of full batches (a DDP step waits for all
            # ranks): the last, partial round of batches is dropped for everyone.
            per_round = self.batch_size * self.world_size
            order = order[: len(order) - len(order) % per_round]
        return order[self.rank :: self.world_size]

    def batches(self) -> list[list[int]]:
        """Every batch of this epoch for this rank."""
        mine = self._mine().tolist()
        cut = [mine[i : i + self.batch_size] for i in range(0, len(mine), self.batch_size)]
        if self.drop_last and cut and len(cut[-1]) < self.batch_size:
            cut.pop()
        return cut

    def __len__(self) -> int:
        # A count needs no permutation (this runs at every epoch start, besides batches()).
        n = len(self.indices)
        if self.drop_last:
            n -= n % (self.batch_size * self.world_size)
        n = max(0, -(-(n - self.rank) // self.world_size))
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        start, self.start = self.start, 0
        for batch in self.batches()[start:]:
            out = _Indices(batch)
            out.epoch = self.epoch
            yield out


class Batch:
    """What a worker sends back: the collated batch and what happened computing it."""

    __slots__ = ("data", "indices", "skipped", "failure", "node_seconds", "worker")

    def __init__(
        self,
        data: Any,
        indices: list[int],
        skipped: list[Failure],
        failure: Failure | None,
        node_seconds: dict[str, float],
        worker: str,
    ):
        self.data = data
        self.indices = indices
        self.skipped = skipped
        self.failure = failure
        self.node_seconds = node_seconds
        self.worker = worker

    def __reduce__(self) -> Any:
        # Small tensors travel inline through the pipe as numpy arrays: torch's shared-memory
        # hand-off (a file descriptor per storage, received, opened and mapped) costs hundreds
        # of µs per tensor, far more than copying a few KB.
        return (_rebuild_batch, (_to_wire(self.data), self.indices, self.skipped, self.failure,
                                 self.node_seconds, self.worker))

    def pin_memory(self) -> Batch:
        """Pins the batch's tensors (used by the DataLoader's pin-memory thread)."""
        from torch.utils.data._utils.pin_memory import pin_memory

        self.data = pin_memory(self.data)  # type: ignore[no-untyped-call]
        return self


INLINE_BYTES = 1 << 20


class _Inline:
    """A small tensor's values, pickled by value (as a numpy array)."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array


def _to_wire(x: Any) -> Any:
    if type(x) is torch.Tensor:
        if (x.device.type == "cpu" and x.layout == torch.strided and not x.requires_grad
                and x.nbytes <= INLINE_BYTES and not x.is_conj() and not x.is_neg()):
            try:
                return _Inline(x.numpy())
            except (TypeError, RuntimeError):  # a dtype numpy cannot hold (bfloat16, float8, ...)
                return x
        return x
    if type(x) is dict:
        return {k: _to_wire(v) for k, v in x.items()}
    if type(x) in (list, tuple):
        return type(x)(_to_wire(v) for v in x)
    return x


def _from_wire(x: Any) -> Any:
    if type(x) is _Inline:
        return torch.from_numpy(x.array)
    if type(x) is dict:
        return {k: _from_wire(v) for k, v in x.items()}
    if type(x) in (list, tuple):
        return type(x)(_from_wire(v) for v in x)
    return x


def _rebuild_batch(data: Any, *rest: Any) -> Batch:
    return Batch(_from_wire(data), *rest)


def _collate_column(column: list[Any]) -> Any:
    """A column collated; a small tensor batch is stacked in ordinary memory (in a worker,
    default_collate allocates shared memory, which pays off only for big batches)."""
    first = column[0]
    if type(first) is torch.Tensor and first.nbytes * len(column) <= INLINE_BYTES:
        try:
            return torch.stack(column)
        except (RuntimeError, TypeError):
            pass
    return default_collate(column)  # type: ignore[no-untyped-call]


_NODES: dict[bytes, Mapping[str, Node]] = {}


class ProgramNodes:
    """Nodes rebuilt from a :class:`Program` once per process; pickles without them.

    Datasets travel to workers as plain data (module names, config, values); the nodes,
    whose callables may be closures made by Hamilton's modifiers, are rebuilt there.
    """

    program: Program
    _nodes: Mapping[str, Node] | None
    _program_key: bytes

    def _keep_nodes(self, program: Program, nodes: Mapping[str, Node] | None) -> None:
        self.program = program
        self._nodes = nodes
        self._program_key = pickle.dumps(program)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_nodes"] = None  # rebuilt from the program in the worker
        return state

    def _get_nodes(self) -> Mapping[str, Node]:
        if self._nodes is None:
            nodes = _NODES.get(self._program_key)
            if nodes is None:
                nodes = _NODES[self._program_key] = load_program(self.program)
            self._nodes = nodes
        return self._nodes


class PassDataset(ProgramNodes, Dataset[dict[str, Any]]):
    """The per-sample work of one pass as a torch ``Dataset``.

    Args:
        program: How to rebuild the nodes (module names and config).
        spec: The pass: nodes to compute and outputs to return.
        whole: Whole values the pass reads (once nodes, inputs, statistics).
        index: The group's items.
        outputs: Output names, in batch order.
        seed: Seed of ``sample_rng``.
        skip: Leave failing samples out of the batch instead of failing it.
        collate_fn: A user collate function taking a list of per-sample dicts, or None to
            collate column by column (tensors stacked, numbers to tensors, strings to lists).
    """

    def __init__(
        self,
        program: Program,
        spec: PassSpec,
        whole: Mapping[str, Any],
        index: SequenceIndex | ArrowIndex,
        outputs: Sequence[str],
        seed: int,
        skip: bool,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        nodes: Mapping[str, Node] | None = None,
    ):
        self.spec = spec
        self.whole = dict(whole)
        self.index = index
        self.outputs = tuple(outputs)
        self.seed = seed
        self.skip = skip
        self.collate_fn = collate_fn
        self._keep_nodes(program, nodes)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """One sample's outputs (epoch 0), as the nodes returned them (not collated)."""
        return self.rows([int(i)], 0)[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Several samples' outputs, computed column by column (a plain torch DataLoader
        calls this with a batch of indices, then its own ``collate_fn``)."""
        return self.rows(list(indices), getattr(indices, "epoch", 0))

    def rows(self, indices: list[int], epoch: int) -> list[dict[str, Any]]:
        """Outputs of ``indices`` as one dict per sample; a failing sample raises ``SampleError``."""
        result = compute_columns(self, indices, self.index.take(indices), epoch)
        failure = result.failure or (result.skipped[0] if result.skipped else None)
        if failure is not None:
            raise _sample_error(failure, self.spec.group, self.spec.number, result.worker)
        return [{k: result.columns[k][n] for k in self.outputs} for n in range(len(result.indices))]

    def compute(self, indices: list[int], epoch: int) -> Batch:
        """Runs the pass over ``indices`` and collates the outputs (the loader's path)."""
        return compute_batch(self, indices, self.index.take(indices), epoch)


class _BatchView(Dataset[Batch]):
    """What ``flowdata.DataLoader`` fetches from: whole collated batches with their report."""

    def __init__(self, base: PassDataset):
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        return self.base.compute(list(indices), getattr(indices, "epoch", 0))

    def __getitem__(self, i: int) -> Batch:
        return self.base.compute([int(i)], 0)


def compute_columns(ds: Any, indices: list[int], items: list[Any], epoch: int) -> Any:
    """Runs a dataset's pass over samples, uncollated (a ``ChunkResult``)."""
    info = get_worker_info()
    worker = "main" if info is None else f"{info.id} (pid {os.getpid()})"
    spec = PassSpec(ds.spec.group, ds.spec.number, ds.spec.computes, ds.outputs, seed=ds.seed, epoch=epoch)
    return run_chunk(ds._get_nodes(), spec, ds.whole, indices, items, worker=worker, skip=ds.skip)


def compute_batch(ds: Any, indices: list[int], items: list[Any], epoch: int) -> Batch:
    """Runs a dataset's pass over one batch of samples and collates the outputs.

    ``ds`` is a :class:`PassDataset` or a stream dataset: anything with ``spec``, ``whole``,
    ``outputs``, ``seed``, ``skip``, ``collate_fn`` and ``_get_nodes()``.
    """
    result = compute_columns(ds, indices, items, epoch)
    data: Any = result.columns
    if result.failure is None:
        data = _collate(ds.outputs, ds.collate_fn, result.columns, len(result.indices))
    return Batch(data, list(result.indices), result.skipped, result.failure, result.node_seconds, result.worker)


def _collate(
    outputs: Sequence[str], collate_fn: Callable[[list[dict[str, Any]]], Any] | None, columns: Mapping[str, list[Any]], n: int
) -> Any:
    if collate_fn is not None:
        rows = [{k: columns[k][i] for k in outputs} for i in range(n)]
        return collate_fn(rows)
    if n == 0:
        return {k: [] for k in outputs}
    return {k: _collate_column(columns[k]) for k in outputs}


def _identity(batch: Any) -> Any:
    """The dataset returns batches already collated."""
    return batch


def _sample_error(f: Failure, group: str, pass_: int, worker: str) -> SampleError:
    err = SampleError(f.node, f.location, f.detail, index=f.index, item=f.item, group=group, pass_=pass_, worker=worker)
    cause = f.error if f.error is not None else RuntimeError(f.detail)
    if worker != "main" and f.traceback_text:
        cause.add_note(f"traceback in worker {worker}:\n{f.traceback_text.rstrip()}")
    err.__cause__ = cause
    return err


class _WorkerInit:
    """Seeds Python's and numpy's global generators per worker, from (seed, worker id).

    Per-sample randomness should come from ``sample_rng``; this only keeps stray global
    randomness reproducible and different between workers.
    """

    def __init__(self, seed: int, user: Callable[[int], None] | None):
        self.seed, self.user = seed, user

    def __call__(self, worker_id: int) -> None:
        # Objects inherited from the parent are not garbage here: keep the cyclic GC from
        # traversing them, which writes to each and so copies every page they sit on.
        import gc

        gc.freeze()
        s = sample_seed(self.seed, -2, worker_id)
        random.seed(s)
        try:
            import numpy as np

            np.random.seed(s % 2**32)
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        if self.user is not None:
            self.user(worker_id)


class DataLoader(TorchDataLoader):  # type: ignore[type-arg]
    """A ``torch.utils.data.DataLoader`` over a flowdata pass.

    Build one with ``Driver.dataloader(...)``. Iterating yields dicts keyed by output name.

    Attributes:
        stats: Results of the Collect nodes computed before the first batch (pass 1).
        report: Samples seen and skipped, and per-node time and calls, from the workers.
    """

    def __init__(
        self,
        dataset: Any,
        sampler: EpochBatches | None,
        *,
        num_workers: int = 0,
        prefetch_factor: int | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        multiprocessing_context: Any = None,
        worker_init_fn: Callable[[int], None] | None = None,
        stats: Mapping[str, Any] | None = None,
        report: Report | None = None,
        progress: bool = False,
        seed: int = 0,
    ):
        self.flow_dataset = dataset
        if sampler is None:
            dataset.emit_batches = True  # the stream yields whole collated batches to us
        super().__init__(
            dataset if sampler is None else _BatchView(dataset),
            batch_size=None if sampler is None else 1,
            batch_sampler=sampler,
            num_workers=num_workers,
            collate_fn=_identity,
            pin_memory=pin_memory,
            prefetch_factor=prefetch_factor if num_workers > 0 else None,
            # A streaming dataset reads its epoch and resume position when iterated, so its
            # workers are started afresh each epoch.
            persistent_workers=persistent_workers and num_workers > 0 and sampler is not None,
            multiprocessing_context=multiprocessing_context if num_workers > 0 else None,
            worker_init_fn=_WorkerInit(seed, worker_init_fn),
            generator=torch.Generator().manual_seed(seed),
        )
        self.flow_sampler = sampler
        self.seed = seed
        self.stats: dict[str, Any] = dict(stats or {})
        self.report = report if report is not None else Report()
        self.progress = progress
        self._served = 0
        self._epoch = 0
        self._resume_at = 0  # set by load_state_dict for the next iteration only

    @property
    def streaming(self) -> bool:
        """Whether the loader streams its source (an ``IterableDataset``) rather than indexing it."""
        return self.flow_sampler is None

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch: it changes the shuffle and every ``sample_rng``.

        Selecting the epoch a ``load_state_dict()`` restored keeps its position, so the
        usual loop (``set_epoch(e)`` at the start of every epoch) resumes where it stopped.
        """
        if int(epoch) == self._epoch and self._resume_at:
            return
        self._epoch = int(epoch)
        self._resume_at = 0
        self._start_at(0)

    def _start_at(self, batch: int) -> None:
        if self.flow_sampler is not None:
            self.flow_sampler.epoch = self._epoch
            self.flow_sampler.start = batch
        else:
            self.flow_dataset.epoch = self._epoch
            self.flow_dataset.skip_batches = batch
        self._served = batch

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._epoch

    def __len__(self) -> int:
        if self.flow_sampler is None:
            raise TypeError("a streaming loader has no length: its source is not indexed")
        return len(self.flow_sampler)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        start, self._resume_at = self._resume_at, 0
        self._start_at(start)
        total = len(self.flow_sampler) if self.flow_sampler is not None else None
        bar = _bar(self.progress, total, start, f"epoch {self._epoch}")
        skipped_before = len(self.report.skipped)
        try:
            it = super().__iter__()
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    break
                self._account(batch)
                self._served += 1
                if bar is not None:
                    bar.update(1)
                yield batch.data
        except (RuntimeError, ConnectionError, EOFError) as exc:
            # torch reports a dead worker from its SIGCHLD handler or as a broken queue.
            if isinstance(exc, RuntimeError) and "DataLoader worker" not in str(exc):
                raise
            error = None
            for _ in range(3):  # torch's SIGCHLD handler may report the same death meanwhile
                try:
                    _forget_workers(it)
                    error = self._worker_died(exc)
                    break
                except RuntimeError:
                    continue
            raise (error or self._worker_died(exc)) from exc
        finally:
            if bar is not None:
                bar.close()
        new = len(self.report.skipped) - skipped_before
        if new:
            _log.warning("epoch %d: %d samples skipped (%s)", self._epoch, new, self.report.summary())
        self._start_at(0)

    def _account(self, batch: Batch) -> None:
        spec = self.flow_dataset.spec
        group = spec.group
        if batch.failure is not None:
            raise _sample_error(batch.failure, group, spec.number, batch.worker).with_traceback(None)
        skips = [Skip(f.index, f.item, f.node, f.detail, group, spec.number) for f in batch.skipped]
        for s in skips:
            _log.warning("skipped %s (worker %s)", s, batch.worker)
        self.report.add(group, len(batch.indices), batch.node_seconds, skips)

    def _worker_died(self, exc: BaseException) -> FlowdataError:
        ahead = max(1, self.num_workers * (self.prefetch_factor or 2))
        held_batches = f"{self._served}..{self._served + ahead - 1}"
        samples = ""
        if self.flow_sampler is not None:
            held = self.flow_sampler.batches()[self._served : self._served + ahead]
            held_batches = f"{self._served}..{self._served + len(held) - 1}"
            samples = f" (samples {_ranges(sorted(i for b in held for i in b))})"
        return FlowdataError(
            f"a DataLoader worker died ({describe(exc)}) while the loader waited for batch "
            f"{self._served} of epoch {self._epoch}; the workers held batches {held_batches}{samples}\n"
            "  fix: check memory use or native crashes in those samples' nodes; "
            "driver.run_sample([...], index=...) runs one in this process"
        )

    def _identity_state(self) -> dict[str, Any]:
        if self.flow_sampler is not None:
            s = self.flow_sampler
            return {
                "streaming": False,
                "seed": s.seed,
                "shuffle": s.shuffle,
                "batch_size": s.batch_size,
                "num_samples": len(s.indices),
                "rank": s.rank,
                "world_size": s.world_size,
                "drop_last": s.drop_last,
            }
        d: Any = self.flow_dataset
        return {
            "shuffle_buffer": d.shuffle_buffer,
            "streaming": True,
            "seed": d.seed,
            "shuffle": d.shuffle,
            "batch_size": d.batch_size,
            "rank": d.rank,
            "world_size": d.world_size,
            "drop_last": d.drop_last,
        }

    def state_dict(self) -> dict[str, Any]:
        """The position in the epoch (batches served so far), and what fixes the order."""
        return {"version": 1, "epoch": self._epoch, "batches_served": self._served, **self._identity_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes at the batch after the last one served, without recomputing earlier ones.

        The loader must have been built with the same data, seed, shuffle, batch size and
        ranks; ``num_workers`` may differ.
        """
        mine = self._identity_state()
        differ = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if differ:
            what = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in differ.items())
            raise FlowdataError(
                f"cannot resume: this loader differs from the saved one ({what})\n"
                "  fix: build the loader with the same data and arguments (num_workers may differ)"
            )
        self._epoch = int(state["epoch"])
        self._resume_at = int(state["batches_served"])
        self._start_at(self._resume_at)

def _forget_workers(it: Any) -> None:
    """Stops torch's SIGCHLD handler from reporting the same death again, later and anywhere.

    The handler raises asynchronously in the main thread while the iterator's workers are
    registered; unregister them and shut the iterator down now.
    """
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        try:
            shutdown()
        except Exception:  # a broken queue or the handler's duplicate report
            pass


def _ranges(values: Sequence[int], limit: int = 12) -> str:
    """``[1, 2, 3, 7]`` as ``"1-3, 7"`` (at most ``limit`` runs)."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    text = ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in runs[:limit])
    return text + (", ..." if len(runs) > limit else "")


def _bar(enabled: bool, total: int | None, initial: int, desc: str, unit: str = "batch") -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False)


def prepare(
    run: Any,
    group: Any,
    pass_: Any,
    outputs: Sequence[str],
    *,
    cache_dir: str | None,
    seed: int,
    skip: bool,
    collate_fn: Callable[[list[dict[str, Any]]], Any] | None,
    progress: bool,
) -> tuple[PassDataset, list[int], dict[str, Any]]:
    """Builds the index, computes what the pass reads (pass 1 included), makes the dataset.

    Returns the dataset, the sample indices to iterate (those skipped in pass 1 left out)
    and the Collect results computed on the way (``loader.stats``).
    """
    from flowdata.index import build_index

    index = build_index(run.source_value(group), cache_dir, group.source)
    run.sources[group.source] = index
    bar = _bar(progress, len(index), 0, "statistics", unit="sample")
    if bar is not None:
        run.on_chunk = lambda n: bar.update(n)
    try:
        whole = {n: run.value(n) for n in pass_.needs if n in run.graph.nodes or n in run.values}
    finally:
        if bar is not None:
            bar.close()
            run.on_chunk = None
    stats = {
        name: run.values[name]
        for g in run.plan.groups
        for name in g.collects
        if name in run.values
    }
    spec = PassSpec(group.source, pass_.number, pass_.computes, tuple(outputs), seed=seed)
    dataset = PassDataset(run.program, spec, whole, index, outputs, seed, skip, collate_fn, nodes=run.graph.nodes)
    skipped = run._skips.get(group.source, set())
    indices = [i for i in range(len(index)) if i not in skipped] if skipped else list(range(len(index)))
    return dataset, indices, stats
