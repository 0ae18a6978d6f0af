"""The run side: one engine for every way a graph runs.

Layers of the engine, each one module (data flows down; nothing below imports what is
above)::

    scheduler   execute() and run_sample(): whole values on demand, passes, chained groups
    engine      Engine: source -> chunks (the one chunk loop) -> executor -> checked chunks
    recorder    Recorder: the on_error policy, skip records and the report, in one place
    consumers   plain Collect functions and reductions sharing one stream (Tee)
    batches     batch nodes, on each collated batch
    chunking    cutting items into chunks sized by time and bytes
    sequential  the Sequential fast path: one compiled function, one sample at a time
    kernel      run_chunk: per-sample work on one chunk, column by column, never raising
    deadline    timeout=: node calls interrupted past it, unresponsive workers ended
    folding     reductions folded in fixed blocks and byte-bounded units, merged in order
    scratch     temporary folders, removed when done, at exit, on SIGTERM, after a kill
    writers     temporary files named for their writer; whether that writer is gone

Rooms the layers use, each a package whose docstring says what it owns::

    sources/      the Source contract, the adapters, the Arrow index, streams in shards,
                  Hugging Face datasets
    executors/    Executor.map(fn, tasks, *, context): inline, processes, Ray; the worker side
    caching/      keys and fingerprints, the pass cache, the sample cache and its store
    distributed/  ranks of torch.distributed sharing a pass

The training iterator (:mod:`flowdata.loader`) builds on ``scheduler`` for its statistics
pass and runs ``kernel`` in torch DataLoader workers for its epochs, reporting through the
same ``Recorder``. docs/concepts.md ("The engine") draws the whole and lists every module.

The door: the names the rest of flowdata (the driver, the loader, the command line, the
I/O helpers) uses, as ``from flowdata.run import Run`` -- each loaded on first use, so that
importing ``flowdata.run`` costs nothing -- and the module ``scratch``. No module outside
``flowdata/run/`` imports a module inside it (a test checks it); the rooms and layers keep
their own names behind this door.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowdata.run import scratch
    from flowdata.run.scheduler import FROM_SOURCE, Run, execute, run_sample
    from flowdata.run.kernel import ChunkResult, Failure, PassSpec, failure_of
    from flowdata.run.batches import BatchStep
    from flowdata.run.recorder import Recorder, failure_error, on_error_mode
    from flowdata.run.deadline import Stuck, Watch, check_timeout
    from flowdata.run.executors import Executor, InlineExecutor, ProcessExecutor, resolve_executor, sigint_deferred
    from flowdata.run.executors.ray import RayExecutor
    from flowdata.run.executors.worker import PassContext, Task
    from flowdata.run.distributed.ranks import FAILED, ItemsPrint, OK, Ranks, block_reprs, exchange, items_print, ranks_of, step_group
    from flowdata.run.caching.samplecache import SampleCache
    from flowdata.run.caching.installed import package_version
    from flowdata.run.caching.passcache import say
    from flowdata.run.sources.contract import ItemIndex, Shards, guarded_take
    from flowdata.run.sources.adapters import IndexSource, call_source, indexed
    from flowdata.run.sources.sharded import ShardedSource
    from flowdata.run.sources.huggingface import refuse_split_by_node

__all__ = [
    "scratch",
    "BatchStep",
    "ChunkResult",
    "Executor",
    "FAILED",
    "FROM_SOURCE",
    "Failure",
    "IndexSource",
    "InlineExecutor",
    "ItemIndex",
    "ItemsPrint",
    "OK",
    "PassContext",
    "PassSpec",
    "ProcessExecutor",
    "Ranks",
    "RayExecutor",
    "Recorder",
    "Run",
    "SampleCache",
    "ShardedSource",
    "Shards",
    "Stuck",
    "Task",
    "Watch",
    "block_reprs",
    "call_source",
    "check_timeout",
    "exchange",
    "execute",
    "failure_error",
    "failure_of",
    "guarded_take",
    "indexed",
    "items_print",
    "on_error_mode",
    "package_version",
    "ranks_of",
    "refuse_split_by_node",
    "resolve_executor",
    "run_sample",
    "say",
    "sigint_deferred",
    "step_group",
]

_DOOR: dict[str, str] = {
    "FROM_SOURCE": "flowdata.run.scheduler",
    "Run": "flowdata.run.scheduler",
    "execute": "flowdata.run.scheduler",
    "run_sample": "flowdata.run.scheduler",
    "ChunkResult": "flowdata.run.kernel",
    "Failure": "flowdata.run.kernel",
    "PassSpec": "flowdata.run.kernel",
    "failure_of": "flowdata.run.kernel",
    "BatchStep": "flowdata.run.batches",
    "Recorder": "flowdata.run.recorder",
    "failure_error": "flowdata.run.recorder",
    "on_error_mode": "flowdata.run.recorder",
    "Stuck": "flowdata.run.deadline",
    "Watch": "flowdata.run.deadline",
    "check_timeout": "flowdata.run.deadline",
    "Executor": "flowdata.run.executors",
    "InlineExecutor": "flowdata.run.executors",
    "ProcessExecutor": "flowdata.run.executors",
    "resolve_executor": "flowdata.run.executors",
    "sigint_deferred": "flowdata.run.executors",
    "RayExecutor": "flowdata.run.executors.ray",
    "PassContext": "flowdata.run.executors.worker",
    "Task": "flowdata.run.executors.worker",
    "FAILED": "flowdata.run.distributed.ranks",
    "ItemsPrint": "flowdata.run.distributed.ranks",
    "OK": "flowdata.run.distributed.ranks",
    "Ranks": "flowdata.run.distributed.ranks",
    "block_reprs": "flowdata.run.distributed.ranks",
    "exchange": "flowdata.run.distributed.ranks",
    "items_print": "flowdata.run.distributed.ranks",
    "ranks_of": "flowdata.run.distributed.ranks",
    "step_group": "flowdata.run.distributed.ranks",
    "SampleCache": "flowdata.run.caching.samplecache",
    "package_version": "flowdata.run.caching.installed",
    "say": "flowdata.run.caching.passcache",
    "ItemIndex": "flowdata.run.sources.contract",
    "Shards": "flowdata.run.sources.contract",
    "guarded_take": "flowdata.run.sources.contract",
    "IndexSource": "flowdata.run.sources.adapters",
    "call_source": "flowdata.run.sources.adapters",
    "indexed": "flowdata.run.sources.adapters",
    "ShardedSource": "flowdata.run.sources.sharded",
    "refuse_split_by_node": "flowdata.run.sources.huggingface",
}


def __getattr__(name: str) -> Any:
    module = _DOOR.get(name)
    if module is None:
        raise AttributeError(f"module 'flowdata.run' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
