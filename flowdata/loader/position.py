"""The position of an epoch, owned by what decides the epoch's order.

Every kind of loader dataset keeps its own position and says what it is, in the style
of torchdata's ``get_state``/``reset``; ``flowdata.DataLoader`` composes them and knows no
kind. The owner is what cuts the epoch into batches: the batch sampler of a map-style
loader (:class:`~flowdata.loader.order.EpochBatches`, in the main process), the dataset of
a stream (:class:`~flowdata.loader.datasets.StreamDataset`, whose workers cut the batches
and skip those served; :class:`~flowdata.loader.datasets.LaneDataset`, a stream in
shards, whose lanes do). The contract (:class:`Position`):

- ``order``: the :class:`~flowdata.loader.order.EpochOrder` of the current epoch;
  ``served``: the batches of it handed out; ``ended``: its last batch was handed out;
  ``remainder``: what Accelerate's ``gather_for_metrics`` keeps of the last round.
- ``start_epoch(epoch)``: the next iteration starts at that epoch's first batch.
- ``delivered(batch)``: the loader handed one more batch out (in the main process).
- ``end_epoch()``: the iteration ran to the epoch's end; the position is the start of
  the next epoch (what a checkpoint after the epoch's loop saves).
- ``state()``: plain, JSON-able values: the format version, the epoch, the batches served,
  what fixes the order (:meth:`Position.identity`, checked on restore) and, mid-epoch,
  what else the kind needs to go on (a stream in shards: its lanes).
- ``restore(state)``: checks a ``state()`` -- a different order or an impossible position
  is a ``FlowdataError`` that changes nothing -- and makes the next iteration start there.

A kind supplies :meth:`Position.identity` and :meth:`Position._begin` (and, when it keeps
more than a count, :meth:`Position._where` and :meth:`Position.delivered`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flowdata.errors import FlowdataError

if TYPE_CHECKING:
    from flowdata.loader.order import EpochOrder
    from flowdata.loader.wire import Batch

__all__ = ["STATE_VERSION", "Position"]

STATE_VERSION = 1  # of state(); a state of another version is refused


class Position:
    """The position of one epoch (see the module docstring)."""

    order: EpochOrder
    served = 0
    ended = False

    @property
    def remainder(self) -> int:
        """Samples of the last, partial round of batches across the ranks (0: none)."""
        return 0

    # --- what a kind supplies -------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """What fixes the order of every epoch, as saved (a restore checks each key)."""
        raise NotImplementedError

    def _begin(self, order: EpochOrder, served: int, saved: Mapping[str, Any]) -> None:
        """Makes the next iteration start ``served`` batches into ``order``'s epoch
        (``saved``: the rest of a restored state, empty at an epoch's start).

        Raises ``FlowdataError``, having changed nothing, when the position is impossible.
        """
        raise NotImplementedError

    def _where(self) -> dict[str, Any]:
        """What the kind keeps of a position inside an epoch, besides the count."""
        return {}

    def _batches(self) -> int | None:
        """Batches in an epoch, when known ahead."""
        return None

    # --- the contract ---------------------------------------------------------------------

    def start_epoch(self, epoch: int) -> None:
        """The next iteration starts at the first batch of ``epoch``."""
        order = self.order.with_epoch(epoch)
        self._begin(order, 0, {})
        self.order, self.served, self.ended = order, 0, False

    def delivered(self, batch: Batch) -> None:
        """One more batch of the epoch was handed out."""
        self.served += 1

    def end_epoch(self) -> None:
        """The epoch's last batch was handed out."""
        self.ended = True

    def state(self) -> dict[str, Any]:
        """The position as plain values (see the module docstring)."""
        if self.ended:  # the start of the next epoch
            return {"version": STATE_VERSION, "epoch": self.order.epoch + 1, "batches_served": 0, **self.identity()}
        where = self._where() if self.served else {}
        return {"version": STATE_VERSION, "epoch": self.order.epoch, "batches_served": self.served,
                **self.identity(), **where}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration start at ``state``'s position, after checking it."""
        mine = self.identity()
        differ = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if differ:
            what = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in differ.items())
            raise FlowdataError(
                f"cannot resume: this loader differs from the saved one ({what})\n"
                "  fix: build the loader with the same data and arguments (num_workers may differ)"
            )
        epoch, served = state.get("epoch"), state.get("batches_served")
        total = self._batches()
        if (state.get("version") != STATE_VERSION or not count(epoch) or not count(served)
                or (total is not None and served > total)):  # type: ignore[operator]
            raise FlowdataError(
                f"cannot resume: the saved position is impossible (version {state.get('version')!r}, epoch "
                f"{epoch!r}, batches_served {served!r}"
                + (f" of {total} batches per epoch" if total is not None else "") + ")\n"
                "  fix: pass a state_dict() of a flowdata.DataLoader as it was saved"
            )
        assert isinstance(epoch, int) and isinstance(served, int)
        order = self.order.with_epoch(epoch)
        self._begin(order, served, state)
        self.order, self.served, self.ended = order, served, False


def count(x: object) -> bool:
    """Whether ``x`` is a count (an int >= 0, not a bool)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0
