"""One process computing statistics over a ``datasets.IterableDataset`` given as an input,
with the pass cache: ``python -m tests.cache_cases.stream_stats KIND DATA CACHE_DIR API``.

``KIND`` is ``parquet`` (Parquet shards in ``DATA``, ``load_dataset(..., streaming=True)``)
or ``memory`` (``Dataset.from_dict(...).to_iterable_dataset(num_shards=4)``); ``API`` is
``execute`` or ``dataloader`` (2 workers). Prints the mean, ``hit`` or ``miss`` (whether the
pass came from the cache), and the number of samples the loader delivered.
"""

from __future__ import annotations

import glob
import logging
import os
import sys

os.environ["HF_DATASETS_OFFLINE"] = "1"  # before datasets is imported: never the network

import datasets  # noqa: E402

import flowdata as fd  # noqa: E402
from flowdata import Collect, Parallel, reduce  # noqa: E402
from flowdata.stats import Stats, Welford  # noqa: E402


def row(stream: object) -> Parallel[dict[str, float]]:
    return stream  # type: ignore[return-value]


def x(row: dict[str, float]) -> float:
    return float(row["x"])


@reduce(Welford)
def stats(x: Collect[float]) -> Stats: ...  # type: ignore[empty-body]


def centred(x: float, stats: Stats) -> float:
    return x - float(stats.mean)


def _stream(kind: str, data: str) -> object:
    if kind == "parquet":
        files = sorted(glob.glob(os.path.join(data, "*.parquet")))
        return datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
    return datasets.Dataset.from_dict({"x": [float(i * i % 97) for i in range(200)]}).to_iterable_dataset(num_shards=4)


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main(kind: str, data: str, cache_dir: str, api: str) -> None:
    said = _Said()
    log = logging.getLogger("flowdata")
    log.addHandler(said)
    log.setLevel(logging.INFO)
    dr = fd.Builder().with_modules(sys.modules[__name__]).build()
    inputs = {"stream": _stream(kind, data)}
    if api == "execute":
        mean = float(dr.execute(["stats"], inputs=inputs, cache_dir=cache_dir)["stats"].mean)
        n = 0
    else:
        loader = dr.dataloader(["centred"], inputs=inputs, cache_dir=cache_dir, batch_size=16, num_workers=2)
        n = sum(len(b["centred"]) for b in loader)
        mean = float(loader.stats["stats"].mean)
    hit = any("loaded from the cache" in m for m in said.messages)
    print(f"{mean!r} {'hit' if hit else 'miss'} {n}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
