"""Peak resident memory of a process *tree*: the main process and all its workers.

``resource.getrusage`` reports one process's peak (or the largest child's), which hides
what a training job really costs when DataLoader workers hold memory too. ``PeakMemory``
samples the summed RSS of the process and all its live descendants on a background
thread::

    with PeakMemory() as peak:
        for batch in loader: ...
    print(f"{peak.mb:.0f} MB")

Pages shared between processes -- everything a forked worker inherits from its parent,
torch's libraries, memory-mapped files -- would be counted once per process by a plain sum
of RSS (three processes with torch loaded "use" 2 GB that way while occupying 0.9 GB). On
Linux each process's proportional set size (PSS: its private pages plus its share of each
shared page) is summed instead, which adds up to what the tree really occupies; elsewhere
RSS is summed, an upper bound. Needs ``psutil`` (``pip install psutil``).
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["PeakMemory", "tree_rss"]


def _psutil() -> Any:
    try:
        import psutil
    except ImportError as exc:  # pragma: no cover - psutil is in the dev extra
        raise ImportError("PeakMemory needs psutil\n  fix: pip install psutil") from exc
    return psutil


def tree_rss(pid: int | None = None) -> int:
    """Resident bytes of process ``pid`` (default: this one) and its descendants, shared pages once.

    Sums PSS where the platform reports it (Linux), else RSS.
    """
    psutil = _psutil()
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            try:
                info = proc.memory_full_info()
            except psutil.AccessDenied:
                info = proc.memory_info()
        except psutil.Error:
            continue  # a worker that ended between listing and reading
        total += int(getattr(info, "pss", info.rss))
    return total


class PeakMemory:
    """Context manager recording the peak summed RSS of this process tree.

    Args:
        interval: Seconds between samples (default 0.05); a peak shorter than that can be
            missed, so the figure is a lower bound of the true peak of the sum.
    """

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def mb(self) -> float:
        """The peak so far, in MiB."""
        return self.peak / 2**20

    def sample(self) -> int:
        """Takes one sample now and returns the current summed RSS in bytes."""
        now = tree_rss()
        self.peak = max(self.peak, now)
        return now

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> PeakMemory:
        self.peak = 0
        self.sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="flowdata-peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()
