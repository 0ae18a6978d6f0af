"""The pages' driver idioms as a mypy --strict / pyright user writes them, with no ignores:
what ``execute()``, ``dataloader()`` and ``dataset()`` return, and the statistics types."""

from __future__ import annotations

from typing import Any

import torch

import flowdata as fd
from flowdata.loader import LaneDataset, PassDataset, StreamDataset
from flowdata.stats import HistogramCounts, Stats, Vocab
from tests.typing_cases import reductions

INPUTS: dict[str, Any] = {"n": 7, "edges": [0.0, 3.0, 7.0]}


def main() -> list[str]:
    """Every idiom once; returns what it saw, for the test that runs it."""
    dr: fd.Driver = fd.Builder().with_modules(reductions).build()
    seen: list[str] = []

    out: dict[str, Any] = dr.execute(["feature_stats", "word_vocab", "row_hist", "rows"], inputs=INPUTS)
    stats: Stats = out["feature_stats"]
    vocab: Vocab = out["word_vocab"]
    hist: HistogramCounts = out["row_hist"]
    mean: torch.Tensor = stats.mean
    seen.append(f"{mean.tolist()} {stats.std.shape} {len(vocab)} {vocab.tokens[0]} {hist.counts.tolist()} {out['rows']}")

    loader: fd.DataLoader = dr.dataloader(["scaled", "label"], inputs=INPUTS, batch_size=4)
    loader.set_epoch(0)
    batches = len(loader)
    for batch in loader:
        scaled: torch.Tensor = batch["scaled"]
        seen.append(f"{tuple(scaled.shape)} {batch['label'].tolist()}")
    loader_stats: Stats = loader.stats["feature_stats"]
    report: fd.Report = loader.report
    seen.append(f"{batches} {loader_stats.count.tolist()} {report.seen} {report.summary().count('samples')}")

    ds: PassDataset = dr.dataset(["label", "jitter"], inputs=INPUTS)  # indexed: a length, ds[i]
    first: dict[str, Any] = ds[0]
    seen.append(f"{len(ds)} {first} {len(ds.index)}")

    stream: StreamDataset | LaneDataset = dr.dataset(["label"], inputs=INPUTS, streaming=True)
    seen.append(" ".join(str(r["label"]) for r in stream))  # a stream is iterated, not measured
    return seen
