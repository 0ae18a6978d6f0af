"""The process pool (``executor="processes"``, :class:`flowdata.ProcessExecutor`): what
cannot be sent to a worker is an error, not a hang."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


UNPICKLABLE = """
import threading
from flowdata import Collect, Parallel

class Held:
    def __init__(self, i):
        self.i, self.lock = i, threading.Lock()

def item(n: int) -> Parallel[Held]:
    yield from (Held(i) for i in range(n))

def value(item: Held) -> int:
    return item.i

def total(value: Collect[int]) -> int:
    return sum(value)
"""


RUN_UNPICKLABLE = """
import sys
sys.path.insert(0, sys.argv[1])
import flowdata as fd
import unpicklable_flow

dr = fd.Builder().with_modules(unpicklable_flow).build()
try:
    dr.execute(["total"], inputs={"n": 20}, executor="processes")
except fd.FlowdataError as exc:
    print(type(exc).__name__, str(exc).splitlines()[0])
"""


def test_unpicklable_items_are_an_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "unpicklable_flow.py").write_text(textwrap.dedent(UNPICKLABLE))
    (tmp_path / "run.py").write_text(RUN_UNPICKLABLE)
    done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        "FlowdataError a task cannot be sent to worker processes: TypeError: cannot pickle '_thread.lock' object")
