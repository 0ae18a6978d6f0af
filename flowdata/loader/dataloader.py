"""``flowdata.DataLoader``: a real ``torch.utils.data.DataLoader`` over a flowdata pass.

It fetches whole collated batches (one message per batch) from the datasets of
:mod:`flowdata.loader.datasets`, reports each batch through the engine's
:class:`~flowdata.run.recorder.Recorder` (failures raised with their context, skips
recorded), and saves and restores its position (``state_dict``/``load_state_dict``).

It knows no dataset kind: the epoch's position is owned by what orders the epoch (its
batch sampler, else its dataset), through the contract of :mod:`flowdata.loader.position`;
the loader tells it where an iteration starts and which batches it handed out, and its
``state_dict()`` is that position's ``state()``.
"""

from __future__ import annotations

import functools
import logging
import pickle
import random
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader as TorchDataLoader

from flowdata.errors import FlowdataError, WorkerDied, describe
from flowdata.loader.accelerate import Prepared
from flowdata.loader.datasets import BatchView
from flowdata.loader.evening import Evening
from flowdata.loader.order import EpochBatches, EpochSampler
from flowdata.loader.position import Position
from flowdata.loader.wire import Batch
from flowdata.report import Report
from flowdata.run import BatchStep, Recorder, Stuck, Watch, failure_error, failure_of, sigint_deferred
from flowdata.sample import sample_seed

__all__ = ["DataLoader", "progress_bar"]

_log = logging.getLogger("flowdata")


def _identity(batch: Any) -> Any:
    """The dataset returns batches already collated."""
    return batch


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
        import signal

        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # forked with it held back
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

    Build one with ``Driver.dataloader(...)``. Iterating yields dicts keyed by output name;
    batch nodes among the outputs are computed here, on each collated batch, after it was
    moved to ``device``.

    ``dataset`` is a flowdata dataset built for it (a stream yielding collated batches);
    ``sampler``, for a map-style one, the :class:`~flowdata.loader.order.EpochBatches`
    that orders it. That sampler, else the stream, owns the epoch's position.

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
        recorder: Recorder | None = None,
        progress: bool = False,
        seed: int = 0,
        device: Any = None,
        batch_step: BatchStep | None = None,
        evening: Evening | None = None,
        watch: Watch | None = None,
    ):
        self.flow_dataset = dataset
        # Who owns the epoch's position: what orders the epoch (flowdata.loader.position).
        self._position: Position = sampler if sampler is not None else dataset
        self._evening = evening  # a stream in shards evened out between ranks (flowdata.loader.evening)
        self._watch = watch  # ends workers whose node does not let go of a sample past the timeout
        if watch is not None:
            weakref.finalize(self, watch.close)
        super().__init__(
            dataset if sampler is None else BatchView(dataset),
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
        if sampler is not None:
            # What frameworks drive: Lightning calls loader.sampler.set_epoch (and
            # batch_sampler.sampler's) every epoch, and keeps a DistributedSampler.
            self._flow_sampler_view = EpochSampler(sampler, weakref.WeakMethod(self.set_epoch))
            sampler.sampler = self._flow_sampler_view
        self.seed = seed
        self.stats: dict[str, Any] = dict(stats or {})
        self.recorder = recorder if recorder is not None else Recorder(Report())
        self.report = self.recorder.report
        self.progress = progress
        self.device = torch.device(device) if device is not None else None
        self.batch_step = batch_step
        self._restored = False  # load_state_dict() set where the next iteration (only) starts

    _accelerate: Prepared | None = None
    end_of_dataloader = False  # read by Accelerate (see flowdata.loader.accelerate)
    _padding_seen: dict[int, int] | None = None  # padding rows of the batches of this epoch delivered so far

    @property
    def remainder(self) -> int:
        """Samples of the last, partial round of batches across the ranks (what Accelerate's
        ``gather_for_metrics`` keeps of the ranks' last batches gathered): 0 when no sample
        is repeated to even out the ranks."""
        if self._evening is not None:
            return self._evening.remainder
        return self._position.remainder

    def padding(self, batch: int) -> int:
        """How many rows at the end of batch ``batch`` (counted from 0) of this rank's
        current epoch repeat a sample to even out the ranks (``even_batches``): 0, except in
        the epoch's last batch of some ranks. Rows ``[:len - padding(b)]`` are the real ones.

        An indexed loader knows it for every batch in advance; a streaming one once the
        batch has been delivered (0 before). A stream in shards pads wherever a rank has
        fewer rows than another at a step: any batch may hold padding, a padding batch
        only padding.
        """
        seen = self._padding_seen.get(batch) if self._padding_seen is not None else None
        if seen is not None:
            return seen
        return self.flow_sampler.padding(batch) if self.flow_sampler is not None else 0

    @property
    def _is_accelerate_prepared(self) -> bool:
        # Accelerate's prepare() keeps a loader that says it is prepared as it is, instead
        # of rebuilding it around its dataset, then marks it: see flowdata.loader.accelerate.
        return True

    @_is_accelerate_prepared.setter
    def _is_accelerate_prepared(self, value: bool) -> None:
        if value and self._accelerate is None:
            order = self._position.order
            self._accelerate = Prepared(order.world_size, order.rank)
            if self.device is None:  # dataloader(device=...) not given
                self.device = self._accelerate.device

    @property
    def streaming(self) -> bool:
        """Whether the loader streams its source (an ``IterableDataset``) rather than indexing it."""
        return self.flow_sampler is None

    _flow_sampler_view: EpochSampler | None = None
    _torch_sampler: Any = None

    @property
    def sampler(self) -> Any:
        """This rank's samples of the current epoch (an :class:`~flowdata.loader.order.EpochSampler`,
        a ``DistributedSampler`` whose ``set_epoch`` is the loader's), or torch's sampler
        of a streaming loader."""
        return self._flow_sampler_view if self._flow_sampler_view is not None else self._torch_sampler

    @sampler.setter
    def sampler(self, value: Any) -> None:  # torch's __init__ sets it
        self._torch_sampler = value

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch: it changes the shuffle and every ``sample_rng``.

        Selecting the epoch a ``load_state_dict()`` restored keeps its position, so the
        usual loop (``set_epoch(e)`` at the start of every epoch) resumes where it stopped.
        Without ``set_epoch``, iterating the loader again after a complete epoch starts the
        next epoch (a new shuffle, as torch's ``shuffle=True`` gives).
        """
        if int(epoch) == self.epoch and self._restored:
            return
        self._restored = False
        self._position.start_epoch(int(epoch))

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._position.order.epoch

    @property
    def _served(self) -> int:
        """Batches of the current epoch handed out."""
        return self._position.served

    def __len__(self) -> int:
        if self.flow_sampler is None:
            raise TypeError("a streaming loader has no length: its source is not indexed")
        return len(self.flow_sampler)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        position = self._position
        if not self._restored:
            # Iterated again after a complete epoch: the next one; else this epoch over.
            position.start_epoch(position.order.epoch + 1 if position.ended else position.order.epoch)
        self._restored = False
        start = position.served
        self._padding_seen = {}  # kept after the epoch: padding(b) of a stream's batches delivered
        total = len(self.flow_sampler) if self.flow_sampler is not None else None
        bar = progress_bar(self.progress, total, start, f"epoch {self.epoch}")
        skipped_before = len(self.report.skipped)
        accelerate = self._accelerate
        if accelerate is not None:
            accelerate.begin(self)
        if self._evening is not None:
            self._evening.begin()
        try:
            with sigint_deferred():  # starting the workers forks them (see sigint_deferred)
                it = self._start_workers()
            if self._evening is not None:  # one exchange between the ranks per batch
                it = self._evening.batches(it)
            # The last batch is known before it is delivered (Accelerate reads that): by the
            # count, or, streaming, by fetching one batch ahead.
            ahead = accelerate is not None and total is None
            batch = next(it, None)
            while batch is not None:
                following = next(it, None) if ahead else None
                self._account(batch)
                position.delivered(batch)
                if bar is not None:
                    bar.update(1)
                if accelerate is not None:
                    self.end_of_dataloader = following is None if ahead else self._served == total
                data = batch.data if self.device is None else _to_device(batch.data, self.device, self.pin_memory)
                if self.batch_step is not None:  # batch nodes: here, after collation, on the device
                    data = self.batch_step(data, batch.indices, functools.partial(self._where, batch, self._served - 1),
                                           self.seed, self.epoch)
                yield data
                batch = following if ahead else next(it, None)
        except GeneratorExit:
            raise
        except (RuntimeError, ConnectionError, EOFError) as exc:
            if self._evening is not None:
                self._evening.fail()  # the other ranks raise in their next exchange, none waits
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
        except BaseException:
            if self._evening is not None:
                self._evening.fail()
            raise
        finally:
            if bar is not None:
                bar.close()
            if accelerate is not None:
                accelerate.end(self)
        new = len(self.report.skipped) - skipped_before
        if new:
            _log.warning("epoch %d: %d samples skipped (%s)", self.epoch, new, self.report.summary())
        position.end_epoch()

    def _start_workers(self) -> Iterator[Batch]:
        """torch's iterator; workers that are not forked receive the dataset pickled, and
        what cannot be pickled is named (torch would raise a bare ``PicklingError``)."""
        try:
            return super().__iter__()
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            what = self.flow_dataset.unpicklable() if self.num_workers > 0 and "pickle" in str(exc) else None
            if what is None:
                raise
            ctx = self.multiprocessing_context
            method = ctx.get_start_method() if ctx is not None else torch.multiprocessing.get_start_method()
            what, fix = what.split("\n  fix: ", 1)
            raise FlowdataError(
                f"the loader's dataset cannot be sent to its {self.num_workers} DataLoader workers, started by "
                f"'{method}': {what}\n  fix: {fix}; or build the loader with multiprocessing_context='fork' "
                "(forked workers inherit it, on Linux and macOS), or num_workers=0"
            ) from None

    def _account(self, batch: Batch) -> None:
        if batch.error is not None:
            raise batch.error.with_traceback(None)
        spec = self.flow_dataset.spec
        if batch.padding:
            self.recorder.report.padded += batch.padding
        if self._padding_seen is not None:
            self._padding_seen[self._served] = batch.padding
        try:  # the batch is recorded as the engine records a chunk
            self.recorder.check(spec.group, spec.number, batch)
        except FlowdataError as exc:
            raise exc.with_traceback(None) from exc.__cause__

    def _where(self, batch: Batch, number: int) -> str:
        """Which batch this is, for a batch node's error (built only when there is one)."""
        samples = f" (samples {_ranges(sorted(batch.indices), 4)})" if batch.indices else ""
        return f"batch {number} of epoch {self.epoch}{samples}"

    def _worker_died(self, exc: BaseException) -> FlowdataError:
        stuck = self._watch.take() if self._watch is not None else []
        if stuck:
            return self._timed_out(stuck[0])
        ahead = max(1, self.num_workers * (self.prefetch_factor or 2))
        held_batches = f"{self._served}..{self._served + ahead - 1}"
        samples = ""
        if self.flow_sampler is not None:
            held = self.flow_sampler.batches()[self._served : self._served + ahead]
            held_batches = f"{self._served}..{self._served + len(held) - 1}"
            samples = f" (samples {_ranges(sorted(i for b in held for i in b))})"
        # The class execute() raises for a dead pool worker: one except clause catches both.
        return WorkerDied(
            f"a DataLoader worker died ({describe(exc)}) while the loader waited for batch "
            f"{self._served} of epoch {self.epoch}; the workers held batches {held_batches}{samples}\n"
            "  fix: check memory use or native crashes in those samples' nodes; "
            "driver.run_sample([...], index=...) runs one in this process"
        )

    def _timed_out(self, stuck: Stuck) -> FlowdataError:
        """The error of a sample whose worker was ended past the timeout (the epoch cannot go on)."""
        spec = self.flow_dataset.spec
        name = spec.computes[stuck.position]
        index = getattr(self.flow_dataset, "index", None)
        item = index.take([stuck.index])[0] if index is not None and 0 <= stuck.index < len(index) else "?"
        assert spec.timeout is not None
        failure = failure_of(self.flow_dataset.nodes[name], stuck.index, item,
                             stuck.error(spec.timeout, "DataLoader worker", ", which ends the epoch"))
        return failure_error(failure, spec.group, spec.number, f"pid {stuck.pid}")

    def state_dict(self) -> dict[str, Any]:
        """The position in the epoch (batches served so far), and what fixes the order:
        plain values (what they are for each kind of dataset: :mod:`flowdata.loader.position`).

        Taken after an iteration ran to the end of its epoch (the usual place: after the
        epoch's ``for`` loop), it is the start of the next epoch, so a resumed training loop
        trains every epoch exactly once.
        """
        return self._position.state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes at the batch after the last one served, without recomputing earlier ones.

        The loader must have been built with the same data, seed, shuffle, batch size and
        ranks; ``num_workers`` may differ. A state that does not fit is refused with a
        ``FlowdataError``, and the loader keeps its position.
        """
        self._position.restore(state)
        self._restored = True


def _to_device(x: Any, device: torch.device, non_blocking: bool) -> Any:
    """The tensors of a batch (in dicts, lists and tuples, as collated) moved to ``device``."""
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=non_blocking)
    if isinstance(x, dict):
        return {k: _to_device(v, device, non_blocking) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        moved = [_to_device(v, device, non_blocking) for v in x]
        return type(x)(*moved) if hasattr(x, "_fields") else type(x)(moved)  # a named tuple takes fields
    return x


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


def progress_bar(enabled: bool, total: int | None, initial: int, desc: str, unit: str = "batch") -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False)
