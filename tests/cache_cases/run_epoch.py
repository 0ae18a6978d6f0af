"""One process running one epoch of the cached loader: ``python -m tests.cache_cases.run_epoch FOLDER CACHE_DIR``.

Prints the sum of every value of the epoch (in sample order), so that processes that ran at
the same time can be compared with each other and with an uncached run.
"""

from __future__ import annotations

import sys

import flowdata as fd
from tests.cache_cases import images


def main(folder: str, cache_dir: str) -> None:
    dr = fd.Builder().with_modules(images).build()
    loader = dr.dataloader(["scaled"], inputs={"folder": folder}, batch_size=4, num_workers=2, cache=["decoded"],
                           cache_dir=cache_dir)
    total = sum(float(b["scaled"].double().sum()) for b in loader)
    print(f"{total!r} {loader.report.cache['decoded']['hits']}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
