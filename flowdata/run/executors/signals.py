"""Ctrl-C around a fork: held back while a pool starts a process, delivered after.

:func:`sigint_deferred` is used wherever flowdata forks or starts workers (a process pool,
Ray's local cluster, a DataLoader's workers); :class:`Held` is the stand-in handler, which a
pool worker recognises and replaces with its parent's own.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["Held", "sigint_deferred"]


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Holds a Ctrl-C back while the block runs (in the main thread), then delivers it.

    A block that forks (a pool starting a worker) must not be cut in two: a
    ``KeyboardInterrupt`` raised inside the interpreter's at-fork hooks is printed and
    dropped ("Exception ignored in ... _releaseLock"), so the run would go on, stuck with
    its stuck worker; and one raised between the fork of a process pool's workers and the
    start of its manager thread leaves workers that nobody will ever tell to stop, which
    the interpreter then joins at exit forever.

    Blocking the signal in the main thread is not enough for that: the kernel then hands it
    to any other thread of the process (torch's, a library's), whose C handler still trips
    the flag the main thread's interpreter raises from, inside the block. So the Python
    handler itself is swapped for one that only records the signal; when the block ends
    the saved handler is put back and, if a Ctrl-C came, called (the default one raises
    ``KeyboardInterrupt`` there). The signal is also blocked for the block, so that children
    forked meanwhile start with it held back (their parent ends them; a pool worker takes
    the parent's own handler back in :func:`_init_worker`).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = Held(signal.getsignal(signal.SIGINT))
    signal.signal(signal.SIGINT, held)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C kept pending arrives now, to ``held``
        signal.signal(signal.SIGINT, held.outer)
        held.deliver()


class Held:
    """A SIGINT handler that records the signal, to be delivered to ``outer`` later."""

    def __init__(self, outer: Any):
        self.outer = outer  # the handler it stands in for (a callable, SIG_DFL, SIG_IGN or None)
        self.frame: FrameType | None = None
        self.came = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.came, self.frame = True, frame

    def deliver(self) -> None:
        """Does what a Ctrl-C during the block would have done, now."""
        if not self.came:
            return
        self.came = False
        if callable(self.outer):
            self.outer(signal.SIGINT, self.frame)
        elif self.outer == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)
