"""Text classification tensors: table -> text -> tokens -> vocabulary -> token ids.

Inputs and config (Hamilton-style; config entries are inputs too):

- ``table``: a CSV or Parquet path, a ``pyarrow.Table``, a pandas ``DataFrame`` or a
  ``datasets.Dataset`` (see :mod:`flowdata_modules._table`), one sample per row, its text in
  ``text_column`` ("text") and its label in ``label_column`` ("label"; None: no labels);
- ``max_length`` (128), ``lowercase`` (True), ``min_count`` (1), ``max_vocab`` (None);
- ``tokenizer`` (config; None): None for the built-in word tokenizer, or the path of a
  Hugging Face ``tokenizers`` JSON file.

Built-in tokenizer: the text is lowercased (``str.lower``) when ``lowercase``, then split by
:data:`WORD` -- a token is a run of word characters (Unicode letters, digits, ``_``) or any
other single character that is not white space. The ``vocab`` reduction counts the tokens
of every sample; ``token_ids`` maps them: ``0`` padding, ``1`` unknown, vocabulary tokens
from ``2`` in descending count, ties by token (``vocab[token]`` is the id).

With a ``tokenizer`` file, the text goes to that tokenizer as it is (no lowercasing here),
its own ids are used, and the graph has no ``vocab`` node at all: pass 1 only counts labels.
The tokenizer is loaded in each process that encodes (a cache keyed by process id, path and
file version), never carried across ``fork``.

Outputs: ``token_ids`` (int64 ``[max_length]``), ``attention_mask`` (int64
``[max_length]``, 1 for real tokens), ``label`` (int64 index into ``label_vocab``),
``pad_id`` and ``vocab_size`` (once). Reductions: ``vocab``, ``label_vocab``.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from hamilton.function_modifiers import config

from flowdata import Collect, Parallel, reduce, vectorized
from flowdata.stats import Vocab, Vocabulary
from flowdata_modules._manifest import LabelVocabulary, label_of
from flowdata_modules._table import bad_rows, label_texts, names_of, row_error, table_columns

__all__ = [
    "PAD",
    "PAD_ID",
    "UNK",
    "UNK_ID",
    "WORD",
    "TextVocabulary",
    "attention_mask",
    "class_names",
    "label",
    "label_name",
    "label_vocab",
    "row",
    "text",
    "token_ids",
    "vocab",
    "words",
]

WORD = re.compile(r"\w+|[^\w\s]")
"""The built-in tokenizer's pattern: a run of word characters, or one other non-space character."""

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
_PAD_NAMES = ("[PAD]", "<pad>", "<PAD>", "[pad]")


class TextVocabulary(Vocabulary):
    """A :class:`~flowdata.stats.Vocabulary` whose result starts with ``<pad>`` (id 0) and
    ``<unk>`` (id 1), counts 0, so that ``vocab[token]`` is the token's id.

    Args:
        min_count: Tokens seen fewer times are left out (they become ``<unk>``).
        max_vocab: Keep at most this many tokens besides the two reserved ones.
    """

    def __init__(self, min_count: int = 1, max_vocab: int | None = None):
        super().__init__(min_count, max_vocab)

    def merge(self, other: Vocabulary) -> TextVocabulary:
        """Adds another vocabulary's counts; returns self."""
        super().merge(other)
        return self

    def result(self) -> Vocab:
        """``<pad>``, ``<unk>``, then the tokens most frequent first, ties in token order."""
        words = super().result()
        return Vocab((PAD, UNK, *words.tokens), (0, 0, *words.counts))

    @classmethod
    def from_state_dict(cls, state: Any) -> TextVocabulary:
        """A TextVocabulary restored from :meth:`state_dict`."""
        v = cls()
        restored = Vocabulary.from_state_dict(state)
        v.min_count, v.max_size, v.counts = restored.min_count, restored.max_size, restored.counts
        return v


def row(table: Any, text_column: str = "text", label_column: str | None = "label",
        encoding: str = "utf-8") -> Parallel[dict[str, Any]]:
    """The samples: the table's rows, its ``text_column`` and ``label_column`` only (the
    table itself, not a copy: flowdata indexes it by rows). A CSV file's text is decoded
    with ``encoding``; a bad row of it (ragged, undecodable) is that sample's error."""
    columns = names_of(table, encoding)
    wanted = [(text_column, "text_column")] + ([] if label_column is None else [(label_column, "label_column")])
    missing = [(c, option) for c, option in wanted if c not in columns]
    if missing:
        names = " nor ".join(f"{c!r} ({option})" for c, option in missing)
        fix = ", ".join(f"{option!r}: ..." for _, option in missing)
        unlabelled = " (or 'label_column': None for text without labels)" if any(
            o == "label_column" for _, o in missing) else ""
        raise ValueError(f"the table has no column {names}; its columns: {', '.join(map(repr, columns)) or 'none'}\n"
                         f"  fix: name the column{'s' if len(missing) > 1 else ''} in the config, "
                         f"Builder().with_config({{{fix}}}){unlabelled}")
    keep = list(dict.fromkeys(c for c, _ in wanted))
    return table_columns(table, keep, encoding)  # type: ignore[no-any-return]


@vectorized
def text(row: pa.RecordBatch, text_column: str = "text") -> list[str]:
    """The rows' texts. A missing cell (None, NaN) is the empty text; a number is its
    ``str()``; anything else is an error naming the column. A bad CSV row raises its error.

    A column of strings is read at once (no dict per row); any other column row by row."""
    column = row.column(text_column)
    if (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)) and not bad_rows(row):
        return column.fill_null("").to_pylist()  # type: ignore[no-any-return]
    return [_text_of(r, text_column) for r in row.to_pylist()]


def _text_of(row: dict[str, Any], text_column: str) -> str:
    """One row's text (see :func:`text`)."""
    row_error(row)
    value = row[text_column]
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (int, float)):
        return str(value)
    raise TypeError(f"column {text_column!r} holds a {type(value).__name__} ({value!r:.60}), not text\n"
                    f"  fix: give a column of strings as text_column")


@config.when(tokenizer=None)
def words(text: str, lowercase: bool = True) -> list[str]:
    """The built-in tokenizer: :data:`WORD`'s matches, after ``str.lower`` when ``lowercase``."""
    return WORD.findall(text.lower() if lowercase else text)


@reduce(TextVocabulary)
@config.when(tokenizer=None)
def vocab(words: Collect[list[str]], min_count: int = 1, max_vocab: int | None = None) -> Vocab:
    """``<pad>``, ``<unk>``, then every token seen at least ``min_count`` times (at most
    ``max_vocab`` of them), most frequent first, ties in token order."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


@vectorized
@config.when(tokenizer=None)
def ids__builtin(words: Sequence[list[str]], vocab: Vocab, max_length: int = 128) -> list[list[int]]:
    """The tokens' ids (``<unk>``'s for a token not in ``vocab``), the first ``max_length``
    (a chunk's documents in one call)."""
    _check_length(max_length)
    return [vocab.ids(ws[:max_length], UNK_ID) for ws in words]


@config.when(tokenizer=None)
def pad_id__builtin() -> int:
    """The padding id: 0."""
    return PAD_ID


@config.when(tokenizer=None)
def vocab_size__builtin(vocab: Vocab) -> int:
    """The number of ids (an embedding's ``num_embeddings``): ``len(vocab)``."""
    return len(vocab)


@vectorized
@config.when_not(tokenizer=None)
def ids__tokenizer(text: Sequence[str], tokenizer: str, max_length: int = 128) -> list[list[int]]:
    """The tokenizer's ids for each text as it is (its special tokens added, its truncation
    keeping them), at most ``max_length``; a batch of texts at a time (``encode_batch``)."""
    _check_length(max_length)
    return [e.ids for e in _encode(_load(tokenizer, max_length), list(text))]


@config.when_not(tokenizer=None)
def pad_id__tokenizer(tokenizer: str) -> int:
    """The tokenizer's padding id: its padding's ``pad_id`` if its JSON enables padding, else
    the id of ``[PAD]``/``<pad>``/``<PAD>``/``[pad]`` if it has one, else 0."""
    tok = _load(tokenizer)
    if tok.padding is not None:
        return int(tok.padding["pad_id"])
    for name in _PAD_NAMES:
        found = tok.token_to_id(name)
        if found is not None:
            return int(found)
    return 0


@config.when_not(tokenizer=None)
def vocab_size__tokenizer(tokenizer: str) -> int:
    """The number of ids of the tokenizer, added tokens included."""
    return int(_load(tokenizer).get_vocab_size(with_added_tokens=True))


@vectorized
def token_ids(ids: Sequence[list[int]], pad_id: int, max_length: int = 128) -> torch.Tensor:
    """int64 ``[max_length]``: the ids, then ``pad_id`` up to ``max_length`` (a chunk's rows
    filled at once; the chunk's tensor is the loader's batch)."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    out = np.full((len(ids), max_length), pad_id, dtype=np.int64)
    out[_real(lengths, max_length)] = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64,
                                                   count=int(lengths.sum()))
    return torch.from_numpy(out)


@vectorized
def attention_mask(ids: Sequence[list[int]], max_length: int = 128) -> torch.Tensor:
    """int64 ``[max_length]``: 1 for each real token, 0 for padding."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    return torch.from_numpy(_real(lengths, max_length).astype(np.int64))


def _real(lengths: np.ndarray, max_length: int) -> np.ndarray:
    """``[n, max_length]`` booleans: True at the positions of real tokens."""
    if len(lengths) and int(lengths.max()) > max_length:
        raise ValueError(f"ids of {int(lengths.max())} tokens do not fit max_length {max_length}")
    return np.arange(max_length) < lengths[:, None]


def class_names(table: Any, label_column: str | None = "label") -> tuple[str, ...] | None:
    """The names of a dataset's ``ClassLabel`` label column, in its order; None otherwise."""
    from flowdata_modules._manifest import class_names as names

    return None if label_column is None else names(table, label_column)


@vectorized
def label_name(row: pa.RecordBatch, class_names: tuple[str, ...] | None = None,
               label_column: str | None = "label") -> list[str]:
    """The rows' labels as strings (a number as written; a ``ClassLabel``'s name): a column
    of strings or integers at once, any other row by row."""
    if label_column is None:
        raise ValueError("label_column is None (text without labels), so there is no label\n"
                         "  fix: ask for token_ids and attention_mask only, or name the label column")
    names = label_texts(row, label_column, class_names)
    if names is not None:
        return names
    out = []
    for r in row.to_pylist():
        row_error(r)
        out.append(label_of(r, label_column, class_names))
    return out


@reduce(LabelVocabulary)
def label_vocab(label_name: Collect[str], class_names: tuple[str, ...] | None) -> Vocab:
    """The labels, most frequent first (ties in name order); a ``ClassLabel``'s names in the
    dataset's order."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


@vectorized
def label(label_name: Sequence[str], label_vocab: Vocab) -> list[int]:
    """The labels' indices in ``label_vocab``."""
    return [label_vocab[n] for n in label_name]


def _check_length(max_length: int) -> None:
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")


_CACHE: dict[tuple[int, str, int, int, int], Any] = {}
_POOL = "TOKENIZERS_PARALLELISM"


def _encode(tok: Any, texts: list[str]) -> list[Any]:
    """The texts' encodings, without ever deadlocking a forked process or starting the
    tokenizer's thread pool unasked: in a child process (DataLoader and pool workers) the
    pool is turned off for that process (``TOKENIZERS_PARALLELISM=false`` there: a pool the
    parent started does not survive ``fork``) and the batch is encoded at once; in the main
    process ``encode_batch`` runs only if ``TOKENIZERS_PARALLELISM`` asks for the pool,
    else the texts are encoded one by one (no pool, so no fork warning later)."""
    if multiprocessing.parent_process() is not None:
        if os.environ.get(_POOL) != "false":  # once per process, not per batch
            os.environ[_POOL] = "false"
    elif os.environ.get(_POOL, "").strip().lower() not in ("1", "true", "on", "yes"):
        return [tok.encode(t) for t in texts]
    # encode_batch_fast: the same ids without character offsets (not needed here).
    return getattr(tok, "encode_batch_fast", tok.encode_batch)(texts)  # type: ignore[no-any-return]


def _load(path: str, max_length: int | None = None) -> Any:
    """The tokenizer of a JSON file, loaded once per process (the key holds the process id:
    a forked worker loads its own and never uses the parent's Rust object or thread pool);
    given ``max_length``, with its padding off and its truncation at ``max_length``."""
    try:
        from tokenizers import Tokenizer
    except ImportError as err:  # pragma: no cover - tokenizers is pinned
        raise ImportError("the tokenizer option needs Hugging Face tokenizers: pip install tokenizers") from err
    from flowdata.io import NotAFile, check_regular

    path = os.fspath(path)
    try:
        info = check_regular(path)  # a FIFO is refused, not waited on
    except FileNotFoundError:
        raise FileNotFoundError(f"tokenizer: {path} does not exist; fix: give the path of a tokenizers JSON file "
                                "(Tokenizer.save(path)), or None for the built-in tokenizer") from None
    except NotAFile as exc:
        raise ValueError(f"tokenizer: {path} is {exc.kind}, not a regular file; fix: give the path of a tokenizers "
                         "JSON file (Tokenizer.save(path)), or None for the built-in tokenizer") from None
    key = (os.getpid(), os.path.abspath(path), info.st_mtime_ns, info.st_size, -1 if max_length is None else max_length)
    tok = _CACHE.get(key)
    if tok is None:
        if len(_CACHE) > 16:
            _CACHE.clear()
        try:
            tok = Tokenizer.from_file(path)
        except Exception as exc:  # the Rust parser's own error (a plain Exception): kept as the cause
            raise ValueError(
                f"tokenizer: {path} is not a tokenizers JSON file that loads ({info.st_size} bytes): {exc}; fix: "
                "give the file Tokenizer.save(path) wrote (re-save it, or download it again if it was cut short), "
                "or None for the built-in tokenizer") from exc
        if max_length is not None:
            tok.no_padding()  # padding is token_ids' job (to max_length, with pad_id)
            tok.enable_truncation(max_length)
        _CACHE[key] = tok
    return tok
