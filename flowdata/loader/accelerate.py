"""The loader under Hugging Face Accelerate: ``Accelerator().prepare(loader)`` keeps it.

``prepare()`` rebuilds a ``torch.utils.data.DataLoader`` around its dataset and batch
sampler. For a ``flowdata.DataLoader`` that would bypass what turns the workers' messages
into dicts and reports skipped and failed samples, and would deal batches to ranks a
second time. ``prepare()`` keeps a loader that says it is prepared already (its
``_is_accelerate_prepared`` attribute, which a ``flowdata.DataLoader`` always reads as
true) and then marks what it prepared; that mark is how the loader learns it serves
Accelerate, and :class:`Prepared` is what it does then, as Accelerate's own loaders do:

- batches go to ``accelerator.device`` (unless ``dataloader(device=...)`` chose one);
- the loader registers with Accelerate's ``GradientState`` while it is iterated and sets
  ``end_of_dataloader`` before its last batch, which ``accelerator.accumulate()`` (the
  gradient sync of the last, partial accumulation) and ``gather_for_metrics()`` read;
- ``remainder`` is the number of samples of the last, partial round of batches across the
  ranks: the ranks are evened out by repeating a few samples at the end of their last
  batches (``even_batches``), so ``gather_for_metrics()`` keeps the first ``remainder``
  rows of the last batches gathered and returns exactly the epoch's samples (0 when
  nothing is repeated: ``even_batches=False``, one process, or an even division).

The loader must deal its samples to as many ranks as Accelerate runs processes: one built
before ``Accelerator()`` started the process group would give every process every sample,
so ``prepare()`` refuses it with the fix.
"""

from __future__ import annotations

from typing import Any

from flowdata.errors import FlowdataError

__all__ = ["Prepared"]


class Prepared:
    """Accelerate's view of the run, read when ``prepare()`` marks the loader."""

    def __init__(self, world_size: int, rank: int) -> None:
        from accelerate.state import GradientState, PartialState  # type: ignore[import-untyped]

        state = PartialState()
        if (state.num_processes, state.process_index) != (world_size, rank):
            raise FlowdataError(
                f"Accelerate runs {state.num_processes} processes (this is process {state.process_index}), but "
                f"this flowdata loader deals its samples to {world_size} rank(s) as rank {rank}: every process "
                "would not get its own share\n"
                "  fix: build the loader after Accelerator() is created (the ranks are read from torch.distributed "
                "when the loader is built), or pass rank=accelerator.process_index, "
                "world_size=accelerator.num_processes to dataloader()"
            )
        self.device = state.device
        self.gradient = GradientState()

    def begin(self, loader: Any) -> None:
        """The loader starts an epoch: Accelerate's gradient state tracks it."""
        loader.end_of_dataloader = False
        self.gradient._add_dataloader(loader)

    def end(self, loader: Any) -> None:
        """The epoch ended (or was left)."""
        self.gradient._remove_dataloader(loader)
