"""A run on a full disk (tests/faults/test_files.py):
``python -m tests.cache_cases.full_disk SCENARIO FOLDER CACHE_DIR FSIZE``.

The process's files cannot grow past ``FSIZE`` bytes (``RLIMIT_FSIZE``, ``SIGXFSZ``
ignored: a write past it fails with ``EFBIG``, as ``ENOSPC`` would). The nodes: ``.npy``
images decoded (cached), ``scaled`` failing on one image in seven (so that chunks are
computed again without it), and two counts. Prints ``RESULT`` and a JSON object: the
report's cache counts and the warnings logged (skips left out).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
import sys
from typing import Any

import numpy as np
import torch

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Count


def path(folder: str) -> Parallel[str]:
    yield from sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".npy"))


def decoded(path: str) -> torch.Tensor:
    return torch.from_numpy(np.load(path))


def scaled(decoded: torch.Tensor) -> torch.Tensor:
    if int(decoded[0, 0, 0]) % 7 == 3:
        raise ValueError("one in seven fails")
    return decoded * 2


@reduce(Count)
def total(scaled: Collect[torch.Tensor]) -> int: ...


@reduce(Count)
def total_again(scaled: Collect[torch.Tensor]) -> int: ...


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "skipped" not in record.getMessage():
            self.messages.append(record.getMessage())


def main(scenario: str, folder: str, cache: str, fsize: int) -> None:
    import flowdata as fd
    from tests.cache_cases import full_disk

    dr = fd.Builder().with_modules(full_disk).build()
    kw: dict[str, Any] = {"cache": ["decoded"], "cache_dir": cache, "on_error": "skip"}
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    said = _Said()
    logging.getLogger("flowdata").addHandler(said)
    if scenario.startswith("execute"):
        report = fd.Report()
        executor = fd.ProcessExecutor(num_workers=2) if scenario == "execute-pool" else None
        try:
            dr.execute(["total"], inputs={"folder": folder}, executor=executor, report=report, **kw)
        finally:
            if executor is not None:
                executor.close()
        counts = report.cache
    else:
        loader = dr.dataloader(["scaled"], inputs={"folder": folder}, batch_size=8,
                               num_workers=0 if scenario == "loader" else 2, streaming=scenario == "stream", **kw)
        for _ in loader:
            pass
        counts = loader.report.cache
    print("RESULT " + json.dumps({"cache": counts, "said": said.messages}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
