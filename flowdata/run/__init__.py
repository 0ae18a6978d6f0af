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
"""
