"""Ranks of ``torch.distributed`` sharing a pass: who computes what, and what crosses.

When a loader is built under ``torch.distributed``, every rank runs the same plan, so
every rank reaches the same passes in the same order. A pass whose consumers are all
reductions over an indexed source is **shared**:

- **The deal.** The ``N`` samples form ``ceil(N / BLOCK)`` fold blocks
  (:data:`~flowdata.reduce.BLOCK`); rank ``r`` takes a contiguous run of whole blocks,
  the runs differing by at most one block (:meth:`Ranks.share`). Each rank computes its
  run with its own executor (its DataLoader workers) and folds it exactly as one process
  folds those blocks.
- **The chain.** One process merges the blocks into a fresh reducer in block order.
  Floating-point merges are not associative, so the ranks do the same, in turn: rank 0
  sends its total (its blocks merged in order) to rank 1, which merges its own blocks one
  by one into it and sends it on; the last rank broadcasts the final state. Every rank
  restores the same arrays, so every rank's statistics are bitwise equal to one
  process's, for any world size and worker count. A reducer whose merge is exact
  (``exact = True``) merges its run first and sends one state. What crosses: per
  reduction, ``2 (W - 1)`` copies of one reducer state (its ``state_dict``: plain arrays
  behind a JSON header, never a pickle), whatever ``N``.
- **Skips** travel as JSON records (one gather): every rank knows every skipped sample,
  so the epochs leave them out alike.
- **The same items.** Before anything is dealt, the ranks exchange one fingerprint of the
  items they index (:func:`items_print`, :meth:`Ranks.same_items`): ranks whose sources
  list different items (a file that appeared between two ranks' listings) would lose and
  repeat samples silently, so every rank raises a ``RankError`` saying how they differ.

A pass that cannot be shared -- a plain Collect function among its consumers (arbitrary
code over every value, whose result cannot travel without a pickle), a stream, a reducer
without ``state_dict``/``from_state_dict`` -- is computed whole by every rank, as a single
process would; its skips are still exchanged, and ranks that skipped different samples
(a transient read error on one rank) raise on every rank rather than go on with results
that differ.

**No hang by construction.** Every part that may fail runs inside :meth:`Ranks.together`:
each rank tells every other rank once, by a point-to-point message, how its part ended
(finished, failed with its error, or stopped because another rank failed), and a thread
per peer waits for theirs. A rank that fails tells the others at once; they notice
between two chunks and stop, so a failure anywhere is an error everywhere within
seconds. The exchanges after it are a fixed sequence of messages (lengths, then bytes)
that every rank issues whatever the data: uneven shares, empty ranks, every sample
skipped. Only a rank that dies without a word (killed) leaves the others waiting, until
the process group's own timeout (``init_process_group(timeout=...)``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from flowdata.errors import FlowdataError, PeerStopped, RankError, describe
from flowdata.reduce import BLOCK
from flowdata.run.caching.codec import decode_value, encode_value

__all__ = ["FAILED", "OK", "ItemsPrint", "Ranks", "exchange", "items_print", "ranks_of", "skips_payload", "step_group"]

_log = logging.getLogger("flowdata")

T = TypeVar("T")

_STATUS_TAG, _CHAIN_TAG = 4601, 4602
_PRINT_BLOCK = 1024  # items per block digest of an index's fingerprint (to find where ranks differ)
_STATUS_BYTES = 1024  # a status and the first kilobyte of an error's text
OK, FAILED, _STOPPED = 0, 1, 2

_NO_WORD = "no word from rank"  # a peer that died without telling (killed), as its status reads
_LOST_FIX = ("{who} stopped without reporting an error (killed by a signal or the out-of-memory killer, or a "
             "native crash): see its log and the system's (dmesg); the other ranks stopped with it")

_GLOO: dict[int, Any] = {}  # a gloo group beside a default group of another backend (NCCL)
_STEPS: dict[int, Any] = {}  # the gloo group of the per-step exchanges (flowdata.loader.evening)


@dataclass(frozen=True)
class Ranks:
    """This process's rank among ``world_size`` ranks of an initialised process group.

    Attributes:
        rank: This process's rank.
        world_size: The number of ranks.
        group: The process group the messages go through (None: the default group).
    """

    rank: int
    world_size: int
    group: Any = None

    def share(self, n: int) -> tuple[int, int]:
        """The samples ``[start, stop)`` this rank computes of ``n``: whole blocks, contiguous."""
        blocks = -(-n // BLOCK)
        base, extra = divmod(blocks, self.world_size)
        lo = self.rank * base + min(self.rank, extra)
        hi = lo + base + (1 if self.rank < extra else 0)
        return min(lo * BLOCK, n), min(hi * BLOCK, n)

    # --- a part every rank runs, ended together ---------------------------------------------

    def together(self, where: str, part: Callable[[Callable[[], None]], T],
                 flag: Callable[[T], bool] = lambda _: True) -> tuple[T, list[bool]]:
        """Runs ``part(check)`` on every rank and returns its result and every rank's flag.

        ``check()``, called between chunks, raises once another rank has failed. When any
        rank fails, every rank raises: the failing rank its own error, the others a
        :class:`~flowdata.errors.RankError` naming it.
        """
        watch = _Watch(self, where)
        try:
            result = part(watch.check)
        except BaseException as exc:
            watch.end(exc, False)
            raise  # end() raised; not reached
        return result, watch.end(None, flag(result))

    # --- fixed exchanges --------------------------------------------------------------------

    def gather(self, payload: bytes) -> list[bytes]:
        """Every rank's ``payload``, in rank order (two collectives)."""
        with exchange(self, "an exchange between the ranks"):
            return self._gather(payload)

    def _gather(self, payload: bytes) -> list[bytes]:
        import torch
        import torch.distributed as dist

        size = torch.tensor([len(payload)], dtype=torch.int64)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(sizes, size, group=self.group)
        longest = max(1, max(int(s) for s in sizes))
        mine = torch.zeros(longest, dtype=torch.uint8)
        if payload:
            mine[: len(payload)] = _as_tensor(payload)
        every = [torch.zeros(longest, dtype=torch.uint8) for _ in range(self.world_size)]
        dist.all_gather(every, mine, group=self.group)
        return [bytes(t[: int(s)].numpy().tobytes()) for t, s in zip(every, sizes, strict=True)]

    def chain(self, where: str, first: Any, then: Callable[[Any], Any],
              restore: Callable[[Mapping[str, Any]], Any]) -> Any:
        """Merges partial reducers across ranks in rank order (see the module docstring).

        Args:
            where: What is merged, for messages.
            first: On rank 0: its total (its blocks merged in order).
            then: On the other ranks: the running total received (restored) merged with
                this rank's part, in order.
            restore: A reducer from a state (the reducer class's ``from_state_dict``).

        Returns:
            The merged reducer, restored from the same arrays on every rank.
        """
        with exchange(self, where):  # the messages only: the reducers' own errors pass as they are
            status, message, error = self._chain(first, then, restore)
        if status != OK:
            if error is not None:
                raise error
            failed = json.loads(message.decode())
            raise RankError(failed["rank"], self.world_size, where, failed["detail"])
        return restore(decode_value(message))

    def _chain(self, first: Any, then: Callable[[Any], Any],
               restore: Callable[[Mapping[str, Any]], Any]) -> tuple[int, bytes, BaseException | None]:
        error: BaseException | None = None
        message: bytes = b""
        status = OK
        if self.rank == 0:
            try:
                message = encode_value(first.state_dict())
            except Exception as exc:
                error, status, message = exc, FAILED, self._why(exc)
        else:
            status, message = self._recv(self.rank - 1)
            if status == OK:
                try:
                    message = encode_value(then(restore(decode_value(message))).state_dict())
                except Exception as exc:
                    error, status, message = exc, FAILED, self._why(exc)
        if self.rank < self.world_size - 1:
            self._send(self.rank + 1, status, message)
        status, message = self._broadcast(self.world_size - 1, status, message)
        return status, message, error

    def same_items(self, source: str, mine: ItemsPrint, describe_items: Callable[[int], list[str]]) -> None:
        """Raises a ``RankError`` on every rank unless every rank indexes the same items.

        One gather of ``(count, digest)``; only when they differ, two more find the first
        item that differs (block digests, then the reprs of that block's items, read by
        ``describe_items(block)``).
        """
        every = [json.loads(p) for p in self.gather(json.dumps({"count": mine.count, "digest": mine.digest,
                                                                 "kind": mine.kind}).encode())]
        if all(e == every[0] for e in every):
            return
        other = next(r for r, e in enumerate(every) if e != every[0])
        counts = [e["count"] for e in every]
        what = (f"rank 0 indexes {counts[0]} items, rank {other} {counts[other]}" if counts[0] != counts[other]
                else f"both index {counts[0]} items, but not the same ones")
        if len(set(counts)) > 2 or (self.world_size > 2 and counts[0] != counts[other]):
            what += f" (per rank: {', '.join(str(c) for c in counts)})"
        blocks = [json.loads(p) for p in self.gather(json.dumps(mine.blocks).encode())]
        first = _first_difference(blocks)
        where = f"the items of source '{source}'"
        if first is not None:
            reprs = [json.loads(p) for p in self.gather(json.dumps(describe_items(first)).encode())]
            at = _first_difference(reprs)
            if at is not None:
                k = next(r for r in range(1, self.world_size) if _get(reprs[r], at) != _get(reprs[0], at))
                other = k
                what += (f"; the first that differs is item {first * _PRINT_BLOCK + at}: rank 0 has "
                         f"{_get(reprs[0], at) or 'none'}, rank {k} has {_get(reprs[k], at) or 'none'}")
        elif mine.kind == "datasets":
            what += "; the datasets' fingerprints differ"
        raise RankError(
            other, self.world_size, f"indexing source '{source}'",
            f"the ranks' sources list different items: {what}; dealt between the ranks, samples would be "
            f"lost and repeated",
            fix=f"give every rank the same items in the same order: {where} must not change while the ranks "
                "start (list the files once, e.g. into a manifest every rank reads, and sort the listing)",
        )

    def barrier(self) -> None:
        """Waits until every rank is here."""
        import torch.distributed as dist

        with exchange(self, "waiting for every rank"):
            dist.barrier(group=self.group)

    def _why(self, exc: BaseException) -> bytes:
        return json.dumps({"rank": self.rank, "detail": describe(exc)}).encode()

    def _send(self, peer: int, status: int, message: bytes) -> None:
        import torch
        import torch.distributed as dist

        dist.send(torch.tensor([status, len(message)], dtype=torch.int64), peer, group=self.group, tag=_CHAIN_TAG)
        if message:
            dist.send(_as_tensor(message), peer, group=self.group, tag=_CHAIN_TAG)

    def _recv(self, peer: int) -> tuple[int, bytes]:
        import torch
        import torch.distributed as dist

        head = torch.zeros(2, dtype=torch.int64)
        dist.recv(head, peer, group=self.group, tag=_CHAIN_TAG)
        status, size = int(head[0]), int(head[1])
        if not size:
            return status, b""
        body = torch.zeros(size, dtype=torch.uint8)
        dist.recv(body, peer, group=self.group, tag=_CHAIN_TAG)
        return status, body.numpy().tobytes()

    def _broadcast(self, root: int, status: int, message: bytes) -> tuple[int, bytes]:
        import torch
        import torch.distributed as dist

        head = torch.tensor([status, len(message)], dtype=torch.int64)
        dist.broadcast(head, root, group=self.group)
        status, size = int(head[0]), int(head[1])
        if not size:
            return status, b""
        body = _as_tensor(message) if self.rank == root else torch.zeros(size, dtype=torch.uint8)
        dist.broadcast(body, root, group=self.group)
        return status, body.numpy().tobytes()


class _Watch:
    """One status message to and from every other rank (see :meth:`Ranks.together`)."""

    def __init__(self, ranks: Ranks, where: str):
        import torch
        import torch.distributed as dist

        self.ranks = ranks
        self.where = where
        self._lock = threading.Lock()
        self._got: dict[int, bytes] = {}
        self._threads: list[threading.Thread] = []
        for peer in range(ranks.world_size):
            if peer == ranks.rank:
                continue
            buf = torch.zeros(_STATUS_BYTES, dtype=torch.uint8)
            work = dist.irecv(buf, src=peer, group=ranks.group, tag=_STATUS_TAG)
            # A receive is waited for exactly once (gloo's waits again would block): here.
            t = threading.Thread(target=self._wait, args=(peer, buf, work), name=f"flowdata-rank-{peer}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _wait(self, peer: int, buf: Any, work: Any) -> None:
        try:
            work.wait()
            got = buf.numpy().tobytes()
        except Exception as exc:  # the process group broke (a peer died, its timeout passed)
            got = _status(FAILED, f"{_NO_WORD} {peer}: {describe(exc)}")
        with self._lock:
            self._got[peer] = got

    def check(self) -> None:
        """Raises :class:`PeerStopped` once another rank has said it failed."""
        if not self._got:
            return
        with self._lock:
            failed = [(p, _read_status(m)) for p, m in sorted(self._got.items())]
        for peer, (status, detail) in failed:
            if status == FAILED:
                raise PeerStopped(peer, detail)

    def end(self, error: BaseException | None, flag: bool) -> list[bool]:
        """Tells every peer how this rank's part ended, waits for theirs, raises if any failed."""
        import torch.distributed as dist

        stopped = _peer_stop(error)
        if error is None:
            mine = _status(OK, "1" if flag else "0")
        elif stopped is not None:
            mine = _status(_STOPPED, "")
        else:
            mine = _status(FAILED, describe(error))
        sends: list[tuple[int, Any]] = []
        lost: dict[int, BaseException] = {}
        for peer in range(self.ranks.world_size):
            if peer == self.ranks.rank:
                continue
            try:
                sends.append((peer, dist.isend(_as_tensor(mine), dst=peer, group=self.ranks.group, tag=_STATUS_TAG)))
            except Exception as exc:  # gloo: the connection to a killed peer is closed
                lost[peer] = exc
        for t in self._threads:
            while t.is_alive():
                t.join(0.5)  # in slices: a Ctrl-C is noticed
        for peer, s in sends:
            try:
                if s is not None:
                    s.wait()
            except Exception as exc:
                lost[peer] = exc
        statuses = {p: _read_status(m) for p, m in self._got.items()}
        for peer, why in lost.items():  # a peer that cannot be told has died, whatever it said before
            if statuses.get(peer, (OK, ""))[0] != FAILED:
                statuses[peer] = (FAILED, f"{_NO_WORD} {peer}: {describe(why)}")
        statuses[self.ranks.rank] = _read_status(mine)
        if error is not None and stopped is None:
            raise error
        failed = sorted(p for p, (status, _) in statuses.items() if status == FAILED)
        if failed:
            first = failed[0]
            detail = statuses[first][1]
            raise RankError(first, self.ranks.world_size, self.where, detail,
                            fix=_LOST_FIX.format(who=f"rank {first}") if detail.startswith(_NO_WORD) else None) from error
        return [statuses[p][1] == "1" for p in range(self.ranks.world_size)]


@dataclass(frozen=True)
class ItemsPrint:
    """What the ranks compare of the items they index: count, digest and block digests."""

    count: int
    digest: str
    blocks: list[str]
    kind: str = "items"


def items_print(items: Any) -> ItemsPrint:
    """The fingerprint of an index's items: a SHA-256 of their reprs (a ``datasets.Dataset``:
    its own fingerprint), with one per block of :data:`_PRINT_BLOCK` items.

    Only the items count, not the files they name (their times may differ between the
    ranks' machines).
    """
    import hashlib

    from flowdata.run.sources.huggingface import fingerprint_of

    n = len(items)
    fingerprint = fingerprint_of(getattr(items, "dataset", None))
    if fingerprint is not None:  # a datasets.Dataset: never decoded here
        return ItemsPrint(n, hashlib.sha256(f"{fingerprint}:{n}".encode()).hexdigest(), [], "datasets")
    own = getattr(items, "items", None)
    if own is not None and not isinstance(own, (list, tuple, range)):
        # Another sized, indexable object used as the index (a torch Dataset): its items
        # may be decoded samples, so only their number is compared.
        return ItemsPrint(n, f"{type(own).__qualname__}:{n}", [], "count")
    whole = hashlib.sha256()
    blocks = []
    for lo in range(0, n, _PRINT_BLOCK):
        h = hashlib.sha256()
        for item in items.take(list(range(lo, min(lo + _PRINT_BLOCK, n)))):
            h.update(repr(item).encode())
            h.update(b"\n")
        digest = h.hexdigest()[:16]
        blocks.append(digest)
        whole.update(digest.encode())
    return ItemsPrint(n, whole.hexdigest(), blocks)


def block_reprs(items: Any, block: int) -> list[str]:
    """Short reprs of the items of one block (to name the first that differs)."""
    from flowdata.errors import short_repr
    from flowdata.run.sources.huggingface import fingerprint_of

    n = len(items)
    lo = block * _PRINT_BLOCK
    own = getattr(items, "items", None)
    if lo >= n or fingerprint_of(getattr(items, "dataset", None)) is not None or (
            own is not None and not isinstance(own, (list, tuple, range))):
        return []
    return [short_repr(x) for x in items.take(list(range(lo, min(lo + _PRINT_BLOCK, n))))]


def _get(values: list[Any], i: int) -> Any:
    return values[i] if i < len(values) else None


def _first_difference(lists: list[list[Any]]) -> int | None:
    """The first position where a list differs from the first (one past an end counts)."""
    longest = max(len(x) for x in lists)
    for i in range(longest):
        if any(_get(x, i) != _get(lists[0], i) for x in lists[1:]):
            return i
    return None


@contextlib.contextmanager
def exchange(ranks: Ranks, where: str) -> Iterator[None]:
    """An exchange whose connection breaks (a rank died: gloo's ``RuntimeError``) raises a
    ``RankError`` instead (which rank is not known here)."""
    try:
        yield
    except FlowdataError:
        raise
    except RuntimeError as exc:
        raise RankError(-1, ranks.world_size, where, f"the connection between the ranks broke: {describe(exc)}",
                        fix=_LOST_FIX.format(who="a rank")) from exc


def _peer_stop(error: BaseException | None) -> PeerStopped | None:
    """The :class:`PeerStopped` behind ``error`` (raised as is or chained), if any."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, PeerStopped):
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def _status(status: int, detail: str) -> bytes:
    text = detail.encode()[: _STATUS_BYTES - 5]
    return (bytes([status]) + len(text).to_bytes(4, "little") + text).ljust(_STATUS_BYTES, b"\0")


def _read_status(message: bytes) -> tuple[int, str]:
    size = int.from_bytes(message[1:5], "little")
    return message[0], message[5 : 5 + size].decode(errors="replace")


def _as_tensor(data: bytes) -> Any:
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def skips_payload(skips: Sequence[Any]) -> bytes:
    """Skip records as JSON (what :meth:`Ranks.gather` carries)."""
    import dataclasses

    return json.dumps([dataclasses.asdict(s) for s in skips]).encode()


def ranks_of(rank: int, world_size: int, *, warn: bool = True) -> Ranks | None:
    """The ranks a loader shares its passes with: those of an initialised ``torch.distributed``
    process group whose rank and size are ``rank`` and ``world_size``; else None (every rank
    computes its passes whole, as before)."""
    if world_size <= 1:
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    if (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
        if not warn:
            return None
        _log.warning(
            "rank=%d, world_size=%d differ from torch.distributed's (rank %d of %d): every rank computes the "
            "statistics pass whole", rank, world_size, dist.get_rank(), dist.get_world_size())
        return None
    return Ranks(rank, world_size, _cpu_group())


def _cpu_group() -> Any:
    """The default group when it is gloo's, else a gloo group beside it (made once; every rank
    builds its loaders in the same order, so every rank makes it at the same point)."""
    import torch.distributed as dist

    if dist.get_backend() == "gloo":
        return None
    key = id(dist.group.WORLD)
    if key not in _GLOO:
        _GLOO[key] = dist.new_group(backend="gloo")
    return _GLOO[key]


def step_group() -> Any:
    """A gloo group of flowdata's own for the exchanges of every step (evening out a stream in
    shards): none of the training's collectives (DDP's gradient all-reduce, in the default
    group, maybe still in flight) can be paired with them. Made once, when the first such
    loader is built; every rank builds its loaders in the same order."""
    import torch.distributed as dist

    key = id(dist.group.WORLD)
    if key not in _STEPS:
        _STEPS[key] = dist.new_group(backend="gloo")
    return _STEPS[key]
