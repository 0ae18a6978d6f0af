"""The run side: one engine for every way a graph runs.

Layers, each one module (data flows down; nothing below imports what is above)::

    scheduler   execute() and run_sample(): whole values on demand, passes, chained groups
    passes      Engine: source -> chunks -> executor -> checked chunks; Recorder: the
                on_error policy, skip records and the report, in one place
    cache       the pass cache's keys: what a pass's reductions depend on
    consumers   plain Collect functions and reductions sharing one stream (Tee)
    ranks       ranks of torch.distributed sharing a pass: the deal of blocks, the chain
                of reducer states, status messages so that no rank waits
    executors   Executor.map(fn, tasks, *, context): inline, processes, any other
    worker      per-process node cache, PassContext (sent once per worker), run_task
    chunking    cutting items into chunks sized by time and bytes
    kernel      run_chunk: per-sample work on one chunk, column by column, never raising
    deadline    timeout=: node calls interrupted past it, unresponsive workers ended
    folding     reductions folded in fixed blocks and byte-bounded units, merged in order
    source      the Source contract (open, index, fingerprint, shard) and its adapters
    usage       whether a Collect function can be handed a stream or needs a list
    scratch     temporary folders, removed when done, at exit, on SIGTERM, after a kill
    writers     temporary files named for their writer; whether that writer is gone

The training iterator (:mod:`flowdata.loader`) builds on ``scheduler`` for its statistics
pass and runs ``kernel`` in torch DataLoader workers for its epochs, reporting through the
same ``Recorder``.
"""
