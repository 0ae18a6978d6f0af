"""Scratch folders: the temporary folders flowdata makes, never left behind.

Every temporary folder flowdata makes -- an Arrow index of a source's items, an
executor's context files, a timeout's watch records, the block states a rank keeps --
is made here, in the system's
temporary directory, named ``flowdata-<kind>-<pid>-<random>``, and removed:

* when its owner is done with it (:func:`remove`, or the owner's finalizer);
* at exit, however the interpreter ends normally (after a Ctrl-C too);
* after ``SIGTERM``, ``kill -9``, a power cut or a native crash: by the next run of any
  kind -- every :class:`~flowdata.Driver` built, and every scratch folder made, calls
  :func:`remove_stale` -- which removes the folders whose owner is gone: no process of
  that pid runs on this machine, or the process that has it now started minutes after
  the folder was last changed (the pid was reused; Linux, see
  :func:`flowdata.run.writers.running`). A live process's folder (another user's too) is
  never removed.

No signal handler is installed for the clean-up: a Python handler only runs between two
bytecodes, so one for ``SIGTERM`` would keep a process whose main thread is in a long C
call running for as long as the call lasts, where the default action ends it at once.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

from flowdata.run.writers import running

__all__ = ["make", "remove", "remove_stale"]

_PREFIX = "flowdata-"
_KINDS = ("index", "context", "watch", "blocks")
_OWNED: dict[str, int] = {}  # folder -> the pid that made it
_LOCK = threading.Lock()


def make(kind: str) -> str:
    """A new scratch folder of ``kind`` (one of ``"index"``, ``"context"``, ``"watch"``, ``"blocks"``)."""
    assert kind in _KINDS, kind
    remove_stale()
    path = tempfile.mkdtemp(prefix=f"{_PREFIX}{kind}-{os.getpid()}-")
    with _LOCK:
        _OWNED[path] = os.getpid()
    return path


def remove(path: str) -> None:
    """Removes a scratch folder (nothing happens when it is already gone)."""
    shutil.rmtree(path, ignore_errors=True)
    with _LOCK:
        _OWNED.pop(path, None)


def remove_stale() -> None:
    """Removes scratch folders of processes that are gone (killed before their clean-up):
    see the module docstring."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(_PREFIX)]
    except OSError:
        return
    for name in names:
        parts = name[len(_PREFIX):].split("-", 2)
        if len(parts) == 3 and parts[0] in _KINDS and parts[1].isdigit():
            pid = int(parts[1])
            path = os.path.join(root, name)
            if pid != os.getpid() and not running(pid, path):
                shutil.rmtree(path, ignore_errors=True)


def _remove_own() -> None:
    me = os.getpid()
    with _LOCK:
        mine = [path for path, pid in _OWNED.items() if pid == me]
    for path in mine:
        remove(path)


atexit.register(_remove_own)
