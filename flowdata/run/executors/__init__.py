"""Executors: where chunks of per-sample work run (the door of this room).

- :mod:`.contract`: ``Executor.map(fn, tasks, *, context)``, ``InlineExecutor``, how a
  task is pickled for another process, and the contexts a worker keeps (``ContextCache``);
- :mod:`.window`: the tasks of one ``map`` call in flight, results in task order, waited for
  half a second at a time (the process pool and Ray both run through it);
- :mod:`.processes`: ``ProcessExecutor``, a pool of worker processes;
- :mod:`.ray`: ``RayExecutor``, tasks on a Ray cluster (Ray imported on first use);
- :mod:`.signals`: Ctrl-C held back while a worker is started;
- :mod:`.choose`: the executor an ``executor=`` argument names;
- :mod:`.worker`: what runs in a worker: the per-process node cache, ``PassContext``
  (sent once per worker), ``run_task`` and ``run_shard``.
"""

from flowdata.run.executors.choose import resolve_executor
from flowdata.run.executors.contract import Executor, InlineExecutor, pickled_task
from flowdata.run.executors.processes import ProcessExecutor
from flowdata.run.executors.signals import sigint_deferred

__all__ = ["Executor", "InlineExecutor", "ProcessExecutor", "pickled_task", "resolve_executor", "sigint_deferred"]
