"""flowdata_modules.text through the public API: exact ids on small known tables, the table
kinds, bad cells, and a tokenizers JSON trained here on texts found on this machine (the
licence files of the installed packages)."""

from __future__ import annotations

import glob
import os
import re
import sys
from pathlib import Path
from typing import Any

os.environ["HF_DATASETS_OFFLINE"] = "1"  # before datasets is imported: never the network

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import flowdata as fd
import flowdata_modules.text as text

OUTPUTS = ["token_ids", "attention_mask", "label"]
SMALL = {
    "text": ["The cat sat.", "the dog, the cat!", "Zebra zebra", "a cat"],
    "label": ["pet", "pet", "wild", "pet"],
}


def _driver(**cfg: Any) -> fd.Driver:
    return fd.Builder().with_modules(text).with_config(cfg).build()


def _all(dr: fd.Driver, table: Any, num_workers: int = 0, outputs: list[str] = OUTPUTS) -> dict[str, torch.Tensor]:
    loader = dr.dataloader(outputs, inputs={"table": table}, batch_size=3, num_workers=num_workers, timeout=60)
    batches = list(loader)
    return {k: torch.cat([b[k] for b in batches]) for k in outputs}


def test_builtin_ids_by_count_ties_by_token_padding_and_mask() -> None:
    dr = _driver(max_length=5)
    vocab = dr.execute(["vocab"], inputs={"table": pa.table(SMALL)})["vocab"]
    # cat 3; the 3; then zebra 2; then the 1-counts in token order ("!" < "," < "." < "a" < ...)
    assert vocab.tokens == ("<pad>", "<unk>", "cat", "the", "zebra", "!", ",", ".", "a", "dog", "sat")
    assert vocab.counts == (0, 0, 3, 3, 2, 1, 1, 1, 1, 1, 1)
    out = _all(dr, pa.table(SMALL))
    assert out["token_ids"].dtype == torch.int64 and out["token_ids"].shape == (4, 5)
    assert out["token_ids"].tolist() == [
        [3, 2, 10, 7, 0],
        [3, 9, 6, 3, 2],  # "the dog , the cat !" truncated at 5
        [4, 4, 0, 0, 0],
        [8, 2, 0, 0, 0],
    ]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1, 0], [1] * 5, [1, 1, 0, 0, 0], [1, 1, 0, 0, 0]]
    assert out["attention_mask"].dtype == torch.int64
    assert out["label"].tolist() == [0, 0, 1, 0]  # pet (3) before wild (1)
    got = dr.execute(["label_vocab", "pad_id", "vocab_size"], inputs={"table": pa.table(SMALL)})
    assert (got["label_vocab"].tokens, got["label_vocab"].counts) == (("pet", "wild"), (3, 1))
    assert (got["pad_id"], got["vocab_size"]) == (0, 11)


def test_min_count_and_max_vocab_make_unknowns() -> None:
    table = pa.table(SMALL)
    vocab = _driver(min_count=2).execute(["vocab"], inputs={"table": table})["vocab"]
    assert vocab.tokens == ("<pad>", "<unk>", "cat", "the", "zebra")
    vocab = _driver(max_vocab=2).execute(["vocab"], inputs={"table": table})["vocab"]
    assert vocab.tokens == ("<pad>", "<unk>", "cat", "the")
    out = _all(_driver(max_vocab=2, max_length=4), table)
    assert out["token_ids"].tolist() == [[3, 2, 1, 1], [3, 1, 1, 3], [1, 1, 0, 0], [1, 2, 0, 0]]


def test_lowercase_off_keeps_case_and_unknowns_at_1() -> None:
    table = pa.table(SMALL)
    vocab = _driver(lowercase=False).execute(["vocab"], inputs={"table": table})["vocab"]
    assert vocab.tokens[:4] == ("<pad>", "<unk>", "cat", "the")
    assert "The" in vocab and "Zebra" in vocab and "zebra" in vocab
    dr = _driver(max_length=4)
    train = dr.dataloader(["token_ids"], inputs={"table": table}, batch_size=4)
    assert train.stats["vocab"]["cat"] == 2
    # unseen words in another table are unknown (1) under the training vocabulary
    unseen = pa.table({"text": ["the unicorn cat"], "label": ["pet"]})
    got = dr.execute(["vocab"], inputs={"table": unseen})["vocab"]
    assert "unicorn" in got  # each call counts its own table ...
    over = dr.run_sample(["token_ids"], index=0, inputs={"table": unseen, **train.stats})
    assert over["token_ids"].tolist() == [3, 1, 2, 0]  # ... unless the training vocabulary is given


def test_table_kinds_give_identical_outputs(tmp_path: Path) -> None:
    import datasets
    import pandas as pd

    rows = {"text": SMALL["text"] * 3, "label": SMALL["label"] * 3}
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    pq.write_table(pa.table(rows), tmp_path / "t.parquet")
    dr = _driver(max_length=6)
    expected = _all(dr, pa.table(rows))
    for table in (str(tmp_path / "t.csv"), tmp_path / "t.parquet", datasets.Dataset.from_dict(rows), pd.DataFrame(rows)):
        got = _all(dr, table)
        assert all(torch.equal(got[k], expected[k]) for k in OUTPUTS), type(table)


def test_extra_columns_are_left_out_and_other_names_configured() -> None:
    table = pa.table({"id": [1, 2], "body": ["x y", "y"], "y": [0, 1]})
    assert text.row(table, "body", "y").column_names == ["body", "y"]
    out = _all(_driver(text_column="body", label_column="y", max_length=3), table)
    assert out["token_ids"].tolist() == [[3, 2, 0], [2, 0, 0]]  # y (2) before x (1)
    assert out["label"].tolist() == [0, 1]  # labels as strings "0", "1": a tie, in order


def test_missing_columns_name_them_and_the_fix() -> None:
    table = pa.table({"body": ["a"], "y": ["b"]})
    with pytest.raises(fd.NodeError, match=r"no column 'text' \(text_column\) nor 'label' \(label_column\); its columns: "
                       r"'body', 'y' -- fix: name the columns in the config, Builder\(\)\.with_config\("
                       r"\{'text_column': \.\.\., 'label_column': \.\.\.\}\) \(or 'label_column': None"):
        _driver().execute(["vocab"], inputs={"table": table})
    with pytest.raises(fd.NodeError, match=r"no column 'label' \(label_column\); its columns: 'body', 'y'"):
        _driver(text_column="body").execute(["vocab"], inputs={"table": table})


def test_unlabelled_text_with_label_column_none() -> None:
    table = pa.table({"text": ["a b", "b"]})
    out = _all(_driver(label_column=None, max_length=2), table, outputs=["token_ids", "attention_mask"])
    assert out["token_ids"].tolist() == [[3, 2], [2, 0]]
    with pytest.raises(fd.SampleError, match="label_column is None"):
        _driver(label_column=None).execute(["label_vocab"], inputs={"table": table})


def test_missing_cells_are_empty_text_numbers_their_str_other_cells_fail() -> None:
    table = pa.table({"text": ["a", None, "a b"], "label": ["x", "y", "x"]})
    out = _all(_driver(max_length=3), table)
    assert out["token_ids"].tolist() == [[2, 0, 0], [0, 0, 0], [2, 3, 0]]
    assert out["attention_mask"][1].sum() == 0
    numbers = pa.table({"text": [12, 12, 7], "label": ["x", "y", "x"]})
    assert _driver().execute(["vocab"], inputs={"table": numbers})["vocab"].tokens == ("<pad>", "<unk>", "12", "7")
    lists = pa.table({"text": [["a"]], "label": ["x"]})
    with pytest.raises(fd.SampleError, match=r"column 'text' holds a list .* not text -- fix: give a column of strings"):
        _driver().execute(["vocab"], inputs={"table": lists})
    unlabelled = pa.table({"text": ["a"], "label": pa.array([None], pa.string())})
    with pytest.raises(fd.SampleError, match=r"no label \(None in column 'label'\)"):
        _driver().execute(["label_vocab"], inputs={"table": unlabelled})
    report = fd.Report()
    got = _driver().execute(["label_vocab"], inputs={"table": pa.table({"text": ["a", "b"], "label": [None, "x"]})},
                            on_error="skip", report=report)
    assert got["label_vocab"].tokens == ("x",) and [s.index for s in report.skipped] == [0]


def test_bad_max_length_is_an_error() -> None:
    with pytest.raises(fd.SampleError, match="max_length must be at least 1, got 0"):
        _driver(max_length=0).run_sample(["token_ids"], index=0, inputs={"table": pa.table(SMALL)})


def _licences() -> list[tuple[str, str]]:
    """(paragraph, package) pairs from the licence files of installed packages."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    pairs = []
    for path in sorted(glob.glob(f"{site}/*.dist-info/LICENSE*") + glob.glob(f"{site}/*.dist-info/licenses/LICENSE*")):
        package = os.path.basename(path.split(".dist-info")[0]).split("-")[0]
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for paragraph in f.read().split("\n\n"):
                if len(paragraph.split()) >= 5:
                    pairs.append((" ".join(paragraph.split()), package))
    return pairs[:400]


@pytest.fixture(scope="module")
def licences() -> pa.Table:
    pairs = _licences()
    assert len(pairs) >= 100
    return pa.table({"text": [p for p, _ in pairs], "label": [k for _, k in pairs]})


@pytest.mark.procs
def test_vocab_and_batches_are_the_same_for_0_and_2_workers(licences: pa.Table) -> None:
    dr = _driver(max_length=32, min_count=2)
    loaders = [dr.dataloader(OUTPUTS, inputs={"table": licences}, batch_size=16, num_workers=n, timeout=60) for n in (0, 2)]
    assert loaders[0].stats["vocab"] == loaders[1].stats["vocab"]
    assert loaders[0].stats["label_vocab"] == loaders[1].stats["label_vocab"]
    assert len(loaders[0].stats["vocab"]) > 100
    for a, b in zip(loaders[0], loaders[1], strict=True):
        assert all(torch.equal(a[k], b[k]) for k in OUTPUTS)


def _train_tokenizer(texts: list[str], path: Path, kind: str) -> Any:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        trainer: Any = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"])
    else:
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]"], min_frequency=2)
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainer)
    if kind == "wordpiece":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    tok.save(str(path))
    return tok


@pytest.mark.procs
@pytest.mark.parametrize("kind", ["wordpiece", "wordlevel"])
def test_a_tokenizers_json_in_workers_after_main_process_use(
    kind: str, licences: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")  # the setting that deadlocks an inherited pool
    texts = licences.column("text").to_pylist()
    path = tmp_path / "tok.json"
    tok = _train_tokenizer(texts, path, kind)
    tok.encode_batch(texts * 4)  # the parent's Rust thread pool is now in use
    dr = _driver(tokenizer=str(path), max_length=24)
    plan = str(dr.plan(OUTPUTS, inputs=["table"]))
    assert not re.search(r"\b(vocab|words)\b", plan), plan  # no vocabulary pass: pass 1 counts labels only
    pad = 3 if kind == "wordpiece" else 0  # [PAD]'s id; a tokenizer without one pads with 0
    assert dr.execute(["pad_id", "vocab_size"], inputs={"table": licences}) == {
        "pad_id": pad, "vocab_size": tok.get_vocab_size()}
    outs = [_all(dr, licences, num_workers=n) for n in (0, 2)]
    assert all(torch.equal(outs[0][k], outs[1][k]) for k in OUTPUTS)
    tok.no_padding()
    tok.enable_truncation(24)
    for i in (0, 7, len(texts) - 1):
        ids = tok.encode(texts[i]).ids
        n = len(ids)
        assert outs[1]["token_ids"][i, :n].tolist() == ids
        assert outs[1]["token_ids"][i, n:].eq(pad).all() and outs[1]["attention_mask"][i].sum() == n
    if kind == "wordpiece":  # [CLS] ... [SEP]: truncation keeps the special tokens
        long = outs[1]["token_ids"][outs[1]["attention_mask"].sum(1) == 24]
        assert len(long) and long[:, 0].eq(tok.token_to_id("[CLS]")).all() and long[:, -1].eq(tok.token_to_id("[SEP]")).all()


@pytest.mark.procs
@pytest.mark.parametrize("pool", ["unset", "true"])
def test_a_tokenizer_encodes_a_batch_at_a_time(
    pool: str, licences: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pool == "unset":
        monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    else:
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", pool)
    path = tmp_path / "tok.json"
    tok = _train_tokenizer(licences.column("text").to_pylist(), path, "wordlevel")
    batches: list[int] = []
    real_encode = text._encode

    def spy(t: Any, texts: list[str]) -> list[Any]:
        batches.append(len(texts))
        return real_encode(t, texts)

    monkeypatch.setattr(text, "_encode", spy)
    dr = _driver(tokenizer=str(path), max_length=16)
    loader = dr.dataloader(["token_ids"], inputs={"table": licences}, batch_size=32)
    ids = torch.cat([b["token_ids"] for b in loader])
    n = licences.num_rows
    assert batches == [32] * (n // 32) + ([n % 32] if n % 32 else [])  # one call per batch, every text in it
    assert os.environ.get("TOKENIZERS_PARALLELISM", "unset") == pool  # the main process's setting is left alone
    tok.no_padding()
    tok.enable_truncation(16)
    for i in (0, n - 1):
        assert ids[i, : len(tok.encode(licences.column("text")[i].as_py()).ids)].tolist() == \
            tok.encode(licences.column("text")[i].as_py()).ids


def test_tokenizer_text_is_not_lowercased_here_and_a_missing_file_names_the_fix(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["Cat cat dog"], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tok.json"))
    dr = _driver(tokenizer=str(tmp_path / "tok.json"), max_length=3)
    got = dr.run_sample(["token_ids"], index=0, inputs={"table": pa.table({"text": ["Cat cat bird"], "label": ["x"]})})
    assert got["token_ids"].tolist() == [tok.token_to_id("Cat"), tok.token_to_id("cat"), 0]
    with pytest.raises(fd.NodeError, match=r"nothere.json does not exist; fix: give the path of a tokenizers JSON"):
        _driver(tokenizer=str(tmp_path / "nothere.json")).execute(["pad_id"], inputs={"table": pa.table(SMALL)})


def test_a_classlabel_keeps_its_names_and_the_pass_cache_restores_vocab(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    ds = datasets.Dataset.from_dict({"text": ["good", "bad", "good fun"], "label": [1, 0, 1]}, features=features)
    dr = _driver(max_length=2)
    first = dr.execute(["vocab", "label_vocab"], inputs={"table": ds}, cache_dir=tmp_path)
    assert first["label_vocab"].tokens == ("neg", "pos")  # the dataset's order, not by count
    assert _all(dr, ds)["label"].tolist() == [1, 0, 1]
    report = fd.Report()
    again = dr.execute(["vocab", "label_vocab"], inputs={"table": ds}, cache_dir=tmp_path, report=report)
    assert again == first and not report.node_calls  # loaded from the pass cache: nothing tokenised
