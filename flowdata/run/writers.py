"""Temporary files named for their writer, and how to tell that the writer is gone.

flowdata writes what others read -- a sample cache segment, a pass cache entry, a loader's
Arrow index, a scratch folder -- under a temporary name first, and renames it into place
(or removes it) when done. A writer killed in between (``kill -9``, a power cut, a native
crash) cannot clean up, so the temporary name says who wrote it: the process id and the
machine (:func:`tag`, ``<pid>~<host>``). A later process removes a temporary whose writer
is :func:`gone`:

* written on this machine: no process of that pid runs, or the one that has the pid now
  started after the file was last changed (by more than a few minutes: the pid was
  reused; start times from ``/proc``, Linux). A running writer's file is never removed.
* written on another machine (a ``cache_dir`` on a shared file system), or by an older
  flowdata (no tag): its pid says nothing here, so only once it has not changed for
  :data:`STALE_AFTER` seconds -- a writer fills its temporary in one go, so one that has
  not grown for an hour is not being written.
"""

from __future__ import annotations

import os
import re
import socket
import time

__all__ = ["HOST", "STALE_AFTER", "gone", "running", "tag"]

HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "localhost"
"""This machine's name, as it appears in a tag (only letters, digits, ``.`` and ``-``)."""

STALE_AFTER = 3600.0
"""Seconds after which the temporary of a writer on another machine counts as abandoned."""


_MARGIN = 300.0
"""Seconds a start time may seem to pass a file's change time by and still be its maker's:
start times are known to about a second, and move with the wall clock when it is set
(a process whose pid was reused started much later, the pid space being large)."""


def tag() -> str:
    """``<pid>~<host>``: who writes a temporary file (this process, on this machine)."""
    return f"{os.getpid()}~{HOST}"


def gone(path: str, pid: int, host: str | None) -> bool:
    """Whether the writer ``pid`` on ``host`` (None: unknown) of the temporary ``path`` is
    gone, so that the file can be removed (see the module docstring)."""
    if host == HOST:
        return pid != os.getpid() and not running(pid, path)
    try:
        return time.time() - os.stat(path).st_mtime > STALE_AFTER
    except OSError:
        return False  # gone already, or not ours to look at


def running(pid: int, path: str) -> bool:
    """Whether the process ``pid`` of this machine that made ``path`` may still run: a
    process of that pid runs, and did not start after ``path`` was last changed (when it
    did, the pid was reused: the maker existed when it wrote) -- give or take
    :data:`_MARGIN`. Where start times cannot be read (not Linux), a running pid counts as
    the maker."""
    if pid <= 0:
        return True  # not a process id: left alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        pass
    started = _start_time(pid)
    if started is None:
        return True
    try:
        changed = os.stat(path).st_mtime
    except OSError:
        return True  # gone already, or not ours to look at: left alone
    return started <= changed + _MARGIN


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from ``/proc``; None where
    it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        with open("/proc/stat", encoding="ascii", errors="replace") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start, in clock ticks after boot
    except (OSError, ValueError, IndexError, StopIteration):
        return None
