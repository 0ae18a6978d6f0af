"""Text: flowdata_modules.text against Hugging Face's ``.map`` pipeline and pre-tokenised ids.

Run from the repository root (no network; every file goes into a temporary folder)::

    .venv/bin/python tests/benchmarks/bench_text.py                          # 100,000 documents, 3 rounds
    .venv/bin/python tests/benchmarks/bench_text.py --n 5000 --rounds 1      # a quick check (a minute)
    .venv/bin/python tests/benchmarks/bench_text.py --flowdata-from ../old   # an older checkout beside

The documents are short (8 to 40 words) sentences of words drawn, Zipf-weighted, from the
words of this machine's numpy/torch/stdlib docstrings, with one of four labels, in one
Parquet file. Batch 256, ``max_length`` 64, shuffled, ``--workers`` (2) workers. Prepared
once, untimed: a ``tokenizers`` WordPiece JSON trained on the first 20,000 documents; the
built-in tokenizer's vocabulary and the label vocabulary (``execute`` of this checkout's
module), given to every contender that needs them; the WordPiece ids of every document.

Rows, each a fresh interpreter (this script with ``--child``), taking turns, ``--rounds``
rounds in rotated order, best and median of the rounds:

- ``pre-tokenised``: the WordPiece ids, masks and labels in a ``TensorDataset``, a torch
  ``DataLoader`` (the Ludwig way: all in RAM);
- ``HF .map``: ``datasets.load_dataset("parquet")`` (offline, cache in the temporary folder),
  ``.map(batched=True)`` with the built-in tokenizer's work (the module's ``WORD`` pattern,
  lowercased, the given vocabulary, padded to ``max_length``; ``num_proc`` ``--hf-num-proc``),
  ``with_format("torch")``, a torch ``DataLoader``; loading and mapping are set-up;
- ``builtin``: ``flowdata_modules.text``, built-in tokenizer, the vocabularies given: a cold
  epoch (every document tokenised in the workers, nothing cached);
- ``wordpiece``: the module with the WordPiece file, uncached; ``cache cold``: the same with
  ``cache=["ids"]`` into a new ``cache_dir``, the epoch that writes it; ``cache warm``: a new
  process over that ``cache_dir``, the epoch that reads it;
- ``vocabulary pass``: the ``dataloader()`` call of the built-in loader without the
  vocabularies (pass 1: ``vocab`` and ``label_vocab``), at 0 and at ``--workers`` workers.

Figures: **epoch docs/s**, the documents over one epoch, ``iter(loader)`` to its last batch;
**with set-up docs/s**, the documents over the set-up (from the start of the contender's
code, its own imports included, to the loader in hand) plus the epoch; **PSS MB**, the peak
of the process tree's proportional set size (:class:`flowdata.peak_memory.PeakMemory`). The
issue's targets are printed with their ratios of the best and of the medians: the built-in
cold epoch >= 1.2x the ``.map`` pipeline's docs/s over its map and its epoch (and, no
target, the same with each row's whole set-up counted); the vocabulary pass >= 1.5x faster at
2 workers than at 0; the warm cached WordPiece epoch >= 0.9x pre-tokenised; the cold epoch
writing the cache >= 0.8x the uncached one. A check line compares the real tokens (the
masks' sum) of the rows that must agree. With ``--flowdata-from DIR`` every flowdata row runs again from that checkout
(``PYTHONPATH=DIR``), labelled ``flowdata@<commit>``: the figure before a change, in the same
sitting. The machine and its load averages are printed at the start and at the end.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import bench_common as bc  # noqa: E402

OUTPUTS = ["token_ids", "attention_mask", "label"]
BATCH, MAX_LENGTH = 256, 64
WORD = re.compile(r"\w+|[^\w\s]")  # flowdata_modules.text.WORD, the built-in tokenizer's pattern
ROWS = {  # row -> what it is; a flowdata row runs again from --flowdata-from
    "pretokenised": "pre-tokenised TensorDataset",
    "hf": "HF .map pipeline (built-in ids)",
    "builtin": "builtin, cold epoch",
    "wordpiece": "wordpiece, uncached",
    "cache-cold": "wordpiece, cache cold (writes)",
    "cache-warm": "wordpiece, cache warm (reads)",
    "pass-0": "vocabulary pass",
    "pass-w": "vocabulary pass",
}
FLOWDATA_ROWS = ("builtin", "wordpiece", "cache-cold", "cache-warm", "pass-0", "pass-w")


@dataclass(frozen=True)
class Measurement:
    setup_s: float  # the start of the contender's code to the loader in hand (a pass row: the dataloader() call)
    map_s: float  # of the set-up, the .map call (the HF row; 0 for the others)
    epoch_s: float  # iter(loader) to the last batch (0 for a pass row)
    docs: int
    tokens: int  # real tokens: the attention masks' sum
    pss_mb: float
    cache: str  # the sample cache's hits and misses, where one is used
    flowdata: str  # the folder flowdata was imported from


def _words() -> list[str]:
    import collections

    import numpy
    import torch

    counts: collections.Counter[str] = collections.Counter()
    for module in (numpy, torch, json, os, re, collections):
        for name in dir(module):
            doc = inspect.getdoc(getattr(module, name, None)) if not name.startswith("_") else None
            if doc:
                counts.update(re.findall(r"[a-z]+", doc.lower()))
    return [w for w, _ in counts.most_common(20000)]


def write_table(path: str, n: int, seed: int = 0) -> None:
    """Writes n labelled short documents to a Parquet file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    words = np.array(_words())
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    lengths = rng.integers(8, 41, n)
    picks = rng.choice(len(words), int(lengths.sum()), p=weights)
    ends = np.cumsum(lengths)
    texts = [" ".join(words[picks[e - k:e]]) + "." for e, k in zip(ends, lengths, strict=True)]
    labels = [("a", "b", "c", "d")[i] for i in rng.integers(0, 4, n)]
    pq.write_table(pa.table({"text": texts, "label": labels}), path)


def train_wordpiece(table: str, path: str) -> None:
    """Trains a WordPiece tokenizer on the first 20,000 documents, saved as JSON."""
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    texts = pq.read_table(table).column("text").to_pylist()[:20000]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=8000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"], show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.save(path)


def prepare(folder: str) -> None:
    """Untimed, once: the vocabularies (this checkout's module) as JSON, the WordPiece ids as arrays."""
    import numpy as np
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    import flowdata as fd
    from flowdata_modules import text

    got = fd.Builder().with_modules(text).with_config({"max_length": MAX_LENGTH}).build().execute(
        ["vocab", "label_vocab"], inputs={"table": f"{folder}/docs.parquet"})
    Path(f"{folder}/stats.json").write_text(json.dumps({k: [list(v.tokens), list(v.counts)] for k, v in got.items()}))
    tok = Tokenizer.from_file(f"{folder}/wordpiece.json")
    tok.no_padding()
    tok.enable_truncation(MAX_LENGTH)
    table = pq.read_table(f"{folder}/docs.parquet")
    ids = [e.ids for e in tok.encode_batch_fast(table.column("text").to_pylist())]
    lengths = np.array([len(i) for i in ids])
    mask = np.arange(MAX_LENGTH) < lengths[:, None]
    out = np.zeros(mask.shape, dtype=np.int64)
    out[mask] = np.concatenate(ids)
    labels = {name: i for i, name in enumerate(got["label_vocab"].tokens)}
    np.savez(f"{folder}/pretokenised.npz", token_ids=out, attention_mask=mask.astype(np.int64),
             label=np.array([labels[v] for v in table.column("label").to_pylist()], dtype=np.int64))


# --- the contenders (each returns a torch DataLoader) ----------------------------------------


def _stats(folder: str) -> dict[str, tuple[list[str], list[int]]]:
    return json.loads(Path(f"{folder}/stats.json").read_text())  # type: ignore[no-any-return]


def _pretokenised(folder: str, workers: int, scratch: str) -> tuple[Any, float]:
    import numpy as np
    import torch

    with np.load(f"{folder}/pretokenised.npz") as arrays:
        tensors = [torch.from_numpy(arrays[k]) for k in OUTPUTS]
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*tensors), batch_size=BATCH, shuffle=True,
                                       num_workers=workers), 0.0


def _hf_encode(batch: dict[str, list[Any]], vocab: dict[str, int], labels: dict[str, int]) -> dict[str, Any]:
    """``.map``'s function: the built-in tokenizer's work on a batch of rows."""
    import numpy as np

    ids = [[vocab.get(w, 1) for w in WORD.findall(t.lower())[:MAX_LENGTH]] for t in batch["text"]]
    mask = np.arange(MAX_LENGTH) < np.array([len(i) for i in ids])[:, None]
    out = np.zeros(mask.shape, dtype=np.int64)
    out[mask] = [i for row in ids for i in row]
    return {"token_ids": out, "attention_mask": mask.astype(np.int64), "label": [labels[v] for v in batch["label"]]}


def _hf(folder: str, workers: int, scratch: str, num_proc: int) -> tuple[Any, float]:
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets
    import torch

    datasets.disable_progress_bars()
    stats = _stats(folder)
    kwargs = {"vocab": {t: i for i, t in enumerate(stats["vocab"][0])},
              "labels": {t: i for i, t in enumerate(stats["label_vocab"][0])}}
    ds = datasets.load_dataset("parquet", data_files=f"{folder}/docs.parquet", split="train", cache_dir=f"{scratch}/hf")
    start = time.perf_counter()
    encoded = ds.map(_hf_encode, batched=True, fn_kwargs=kwargs, remove_columns=ds.column_names,
                     num_proc=num_proc if num_proc > 1 else None)
    return torch.utils.data.DataLoader(encoded.with_format("torch"), batch_size=BATCH, shuffle=True,
                                       num_workers=workers), time.perf_counter() - start


def _flowdata(folder: str, workers: int, scratch: str, row: str) -> tuple[Any, float]:
    import flowdata as fd
    from flowdata.stats import Vocab
    from flowdata_modules import text

    stats = {k: Vocab(tuple(v[0]), tuple(v[1])) for k, v in _stats(folder).items()}
    config: dict[str, Any] = {"max_length": MAX_LENGTH}
    inputs: dict[str, Any] = {"table": f"{folder}/docs.parquet", "label_vocab": stats["label_vocab"]}
    if row == "builtin":
        inputs["vocab"] = stats["vocab"]
    else:
        config["tokenizer"] = f"{folder}/wordpiece.json"
    cache: dict[str, Any] = {"cache": ["ids"], "cache_dir": f"{folder}/cache-{Path(scratch).name}"} if row.startswith("cache") else {}
    return fd.Builder().with_modules(text).with_config(config).build().dataloader(
        OUTPUTS, inputs=inputs, batch_size=BATCH, shuffle=True, num_workers=workers, **cache), 0.0


def _parts(batch: Any) -> tuple[Any, Any, Any]:
    """(token_ids, attention_mask, label) of a batch: a TensorDataset's list or a dict."""
    return tuple(batch) if isinstance(batch, (list, tuple)) else tuple(batch[k] for k in OUTPUTS)


# --- the children ----------------------------------------------------------------------------


def child(row: str, folder: str, workers: int, scratch: str, num_proc: int) -> None:
    """One timed run: the loader built, one shuffled epoch (a pass row: the pass alone)."""
    import numpy  # noqa: F401  -- every child alike, before the clock
    import pyarrow  # noqa: F401
    import torch  # noqa: F401

    import flowdata
    from flowdata.peak_memory import PeakMemory

    docs = tokens = 0
    epoch, map_s, cache = 0.0, 0.0, ""
    with PeakMemory() as peak:
        if row.startswith("pass"):
            from flowdata_modules import text

            dr = flowdata.Builder().with_modules(text).with_config({"max_length": MAX_LENGTH}).build()
            start = time.perf_counter()
            dr.dataloader(OUTPUTS, inputs={"table": f"{folder}/docs.parquet"}, batch_size=BATCH, num_workers=workers)
            setup = time.perf_counter() - start
        else:
            start = time.perf_counter()
            if row == "pretokenised":
                loader, map_s = _pretokenised(folder, workers, scratch)
            elif row == "hf":
                loader, map_s = _hf(folder, workers, scratch, num_proc)
            else:
                loader, map_s = _flowdata(folder, workers, scratch, row)
            setup = time.perf_counter() - start
            for batch in loader:
                _, mask, label = _parts(batch)
                docs += len(label)
                tokens += int(mask.sum())
            epoch = time.perf_counter() - start - setup
            counts = getattr(getattr(loader, "report", None), "cache", {}).get("ids")
            cache = f"{counts['hits']} hits, {counts['misses']} misses" if counts else ""
    bc.emit(Measurement(setup, map_s, epoch, docs, tokens, peak.mb, cache, str(Path(flowdata.__file__).parent)))


# --- the parent ------------------------------------------------------------------------------


TARGETS = (  # what, (row, its figure), (the row it is set against, its figure), the target
    ("builtin cold epoch / HF .map pipeline, its map counted", ("builtin", "epoch"), ("hf", "map+epoch"), ">= 1.2x"),
    ("the same, each row's whole set-up counted (imports too)", ("builtin", "total"), ("hf", "total"), "-"),
    ("vocabulary pass, 0 workers' time / the workers' time", ("pass-0", "time"), ("pass-w", "time"), ">= 1.5x"),
    ("warm cached WordPiece epoch / pre-tokenised TensorDataset", ("cache-warm", "epoch"), ("pretokenised", "epoch"),
     ">= 0.9x"),
    ("cold epoch writing the cache / uncached WordPiece epoch", ("cache-cold", "epoch"), ("wordpiece", "epoch"),
     ">= 0.8x"),
)


def _figure(runs: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """Best and median over the rounds of docs/s over the epoch (``epoch``), the map and the
    epoch (``map+epoch``), the set-up and the epoch (``total``), or of the set-up's seconds (``time``)."""
    got: tuple[float, float]
    if key == "time":
        got = bc.best_median([r["setup_s"] for r in runs])
    else:
        extra = {"epoch": "", "map+epoch": "map_s", "total": "setup_s"}[key]
        got = bc.best_median([r["docs"] / (r["epoch_s"] + (r[extra] if extra else 0.0)) for r in runs], True)
    return got


def report(results: dict[str, list[dict[str, Any]]], failures: dict[str, list[str]], rounds: int,
           workers: dict[str, int]) -> None:
    """The rows, then the issue's targets as ratios, then the token check."""
    print(f"{'row':56} {'workers':>7} {'epoch docs/s':>17} {'with set-up docs/s':>19} {'set-up s':>15} "
          f"{'PSS MB':>13}  rounds  notes")
    for job, runs in results.items():
        label = f"{job.split('/')[0] + ' ' if '/' in job else ''}{ROWS[job.split('/')[-1]]}"
        if not runs:
            print(f"{label:56} {workers[job]:7}  failed: {failures[job][0]}")
            continue
        setup, pss = _figure(runs, "time"), bc.best_median([r["pss_mb"] for r in runs])
        rates = f"{'':17} {'':19}"
        if runs[0]["docs"]:
            (rate, rate_m), (total, total_m) = _figure(runs, "epoch"), _figure(runs, "total")
            rates = f"{rate:7.0f} / {rate_m:7.0f} {total:8.0f} / {total_m:8.0f}"
        notes = runs[-1]["cache"] or (f"map {min(r['map_s'] for r in runs):.2f} s (best)" if runs[0]["map_s"] else "")
        print(f"{label:56} {workers[job]:7} {rates} {setup[0]:6.2f} / {setup[1]:6.2f} {pss[0]:5.0f} / {pss[1]:5.0f}"
              f"  {len(runs)}/{rounds}     {notes}")
        for why in failures.get(job, []):
            print(f"{'':56} {workers[job]:7}  a round failed: {why}")
    for prefix in ["", *sorted({job.split("/")[0] + "/" for job in results if "/" in job})]:
        for what, (a, key_a), (b, key_b), target in TARGETS:
            runs_a, runs_b = results.get(prefix + a), results.get((prefix if b in FLOWDATA_ROWS else "") + b)
            got = "no figure"
            if runs_a and runs_b:
                (best_a, median_a), (best_b, median_b) = _figure(runs_a, key_a), _figure(runs_b, key_b)
                got = f"{best_a / best_b:.2f}x best, {median_a / median_b:.2f}x median"
            print(f"target    {prefix[:-1] + ' ' if prefix else ''}{what}: {got} (issue: {target})")
    tokens = {job: {r["tokens"] for r in runs} for job, runs in results.items() if runs and runs[0]["docs"]}
    for group in (("hf", "builtin"), ("pretokenised", "wordpiece", "cache-cold", "cache-warm")):
        seen = {j: tokens[j] for j in tokens if j.split("/")[-1] in group}
        same = len(set().union(*seen.values())) == 1 if seen else False
        print(f"check     real tokens of {', '.join(seen)}: {'identical' if same else 'DIFFERENT'} "
              f"({', '.join(str(sorted(v)) for v in seen.values())})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hf-num-proc", type=int, default=1, help=".map's num_proc (default 1, its default)")
    parser.add_argument("--flowdata-from", metavar="DIR", help="also run the flowdata rows from this checkout")
    parser.add_argument("--child", nargs=5, metavar=("ROW", "FOLDER", "WORKERS", "SCRATCH", "NUM_PROC"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        row, folder, w, scratch, num_proc = args.child
        child(row, folder, int(w), scratch, int(num_proc))
        return
    sys.path.insert(0, str(ROOT))  # prepare() reads the vocabularies with this checkout's module
    print("\n".join(bc.machine_lines()))
    print(f"packages  torch {bc.version('torch')}, tokenizers {bc.version('tokenizers')}, datasets "
          f"{bc.version('datasets')}, pyarrow {bc.version('pyarrow')}; flowdata from {ROOT} @ {bc.short_commit(ROOT)}"
          + (f", and from {Path(args.flowdata_from).resolve()}" if args.flowdata_from else ""))
    print(bc.load_line("at the start"))
    envs = {"": bc.checkout_env(ROOT)}
    if args.flowdata_from:
        envs[f"flowdata@{bc.short_commit(args.flowdata_from)}/"] = bc.checkout_env(args.flowdata_from)
    with tempfile.TemporaryDirectory(prefix="bench-text-") as folder:  # removed at the end
        start = time.perf_counter()
        write_table(f"{folder}/docs.parquet", args.n)
        train_wordpiece(f"{folder}/docs.parquet", f"{folder}/wordpiece.json")
        prepare(folder)
        print(f"data      {args.n} documents, batch {BATCH}, max_length {MAX_LENGTH}, shuffled, {args.workers} "
              f"workers (prepared in {time.perf_counter() - start:.1f} s); .map num_proc {args.hf_num_proc}; "
              f"{args.rounds} round(s), rows taking turns; best / median of the rounds")
        jobs = [*ROWS] + [p + r for p in envs if p for r in FLOWDATA_ROWS]
        workers = {job: 0 if job.endswith("pass-0") else args.workers for job in jobs}
        results: dict[str, list[dict[str, Any]]] = {job: [] for job in jobs}
        failures: dict[str, list[str]] = {}
        turns = [j for j in jobs if not j.endswith("cache-warm")]  # a warm row follows its cold one
        for n, job in enumerate(bc.take_turns(turns, args.rounds)):
            prefix, row = (job.split("/")[0] + "/", job.split("/")[1]) if "/" in job else ("", job)
            for step in [job, prefix + "cache-warm"] if row == "cache-cold" else [job]:
                got = bc.run_child(__file__, f"{step} at {workers[step]} workers",
                                   ["--child", step.split("/")[-1], folder, str(workers[step]), f"{folder}/run{n}",
                                    str(args.hf_num_proc)], timeout_s=3600, env=envs[prefix])
                if isinstance(got, str):
                    failures.setdefault(step, []).append(got)
                else:
                    results[step].append(got)
            shutil.rmtree(f"{folder}/run{n}", ignore_errors=True)
            shutil.rmtree(f"{folder}/cache-run{n}", ignore_errors=True)
        report(results, failures, args.rounds, workers)
        for job, runs in results.items():  # the checkout each flowdata row really ran
            expected = envs["" if "/" not in job else job.split("/")[0] + "/"]["PYTHONPATH"].split(os.pathsep)[0]
            elsewhere = {r["flowdata"] for r in runs if not r["flowdata"].startswith(expected)}
            if elsewhere and job.split("/")[-1] in FLOWDATA_ROWS:
                print(f"note      {job} imported flowdata from {', '.join(elsewhere)}, not from {expected}")
    print(bc.load_line("at the end"))


if __name__ == "__main__":
    main()
