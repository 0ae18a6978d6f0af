"""Runs in a fresh process a run whose ``cache_dir`` cannot be written:
``python -m tests.cache_cases.unwritable_child SPEC`` (a JSON object, see :func:`main`).

A fresh interpreter, not a fork of the test process: a fork of a process with threads
(torch's, Arrow's) may inherit a lock held by one of them and hang.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import resource
import signal
import sys
import tempfile
from typing import Any

import pyarrow.ipc  # noqa: F401  # imported before the process drops its rights
import torch

import flowdata as fd
from flowdata.run.caching import samplecache
from flowdata.run.caching import codec, itemkeys, records, segments, store  # noqa: F401  # imported before the
# process drops its rights: a checkout in a private folder (a clone in mktemp -d) is not readable by nobody,
# and the sample cache imports these where it first uses them (a forked pool worker too)
from tests.cache_cases import images, numbers

NOBODY = 65534


def _digest(tensors: list[torch.Tensor]) -> str:
    return hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() for t in tensors)).hexdigest()


def run(data: str, cache: str | None, workers: int) -> dict[str, Any]:
    """Statistics with ``execute()`` and one epoch of a loader over them, both caching the
    decoded images (``cache=``) and the statistics pass (``cache_dir=``); the loader's source
    is a generator, so its items go to an Arrow index under ``cache_dir``."""
    dr = fd.Builder().with_modules(images).build()
    kw: dict[str, Any] = dict(cache_dir=cache, cache=["decoded"]) if cache is not None else {}
    report = fd.Report()
    executor = fd.ProcessExecutor(num_workers=workers) if workers else None
    try:
        stats = dr.execute(["stats"], inputs={"folder": data}, executor=executor, report=report, **kw)["stats"]
    finally:
        if executor is not None:
            executor.close()
    loader = dr.dataloader(["normalized"], inputs={"folder": data}, batch_size=8, num_workers=workers, **kw)
    batches = [b["normalized"] for b in loader]
    return {"stats": _digest([stats.mean, stats.var]), "epoch": _digest(batches),
            "samples": sum(len(b) for b in batches), "execute": report.cache, "loader": loader.report.cache}


def index(cache: str, n: int, workers: int) -> dict[str, Any]:
    """One epoch over ``n`` items of a generator (an Arrow index under ``cache``)."""
    dr = fd.Builder().with_modules(numbers).build()
    loader = dr.dataloader(["number"], inputs={"n": n}, cache_dir=cache, batch_size=20_000, num_workers=workers)
    got = [v for b in loader for v in b["number"].tolist()]
    mine = glob.glob(os.path.join(tempfile.gettempdir(), f"flowdata-index-{os.getpid()}-*"))
    return {"ok": got == list(range(n)), "samples": len(got), "scratch": mine}


class Said(logging.Handler):
    """Keeps the warnings logged (shared with tests/faults/test_cache_dirs.py)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def main(spec: dict[str, Any]) -> None:
    """``spec``: ``scenario`` (``"run"`` or ``"index"``) and its ``args``; ``log`` (the decode
    log); ``warm`` (arguments of a first ``run`` where it may write, so that every module is
    imported before the rights are dropped; then ``log`` is removed); ``drop`` (run as
    ``nobody`` when root); ``fsize`` (a file size limit in bytes: a write past it fails with
    EFBIG, as on a full disk). Prints ``RESULT`` and a JSON object: what the scenario
    returned, and the warnings logged."""
    os.environ["FD_CACHE_LOG"] = spec.get("log") or os.devnull
    if spec.get("warm"):
        run(*spec["warm"])
        if spec.get("log") and os.path.exists(spec["log"]):
            os.remove(spec["log"])
        samplecache.forget()
    if spec.get("drop") and os.geteuid() == 0:
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    if spec.get("fsize"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["fsize"], resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    said = Said()
    logging.getLogger("flowdata").addHandler(said)
    out = {"run": run, "index": index}[spec["scenario"]](*spec["args"])
    print("RESULT " + json.dumps({"out": out, "said": said.messages}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
