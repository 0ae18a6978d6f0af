"""Reading a manifest (a private helper of the bundled modules).

A manifest is one of

- a CSV file with columns ``path,label`` (other columns ignored), paths relative to the
  CSV's folder;
- a folder: every file with one of the module's ``suffixes`` below it (symbolic links
  followed, each real file and folder visited once -- a link loop is skipped with one
  warning --, hidden files and folders left out), labelled by the **class folder** it is
  reached through first in sorted order: the first folder under the root (``train/dog/001.wav`` and ``train/dog/x/002.wav`` ->
  ``dog``), as torchvision's ``ImageFolder`` does; a file directly in the root has no
  label and is an error;
- a glob pattern (``*``, ``?``, ``[``; ``**`` crosses folders) that names no existing
  file: the matching files with one of the ``suffixes``, each labelled by the folder that
  holds it;
- a Hugging Face ``datasets.Dataset`` or ``datasets.IterableDataset``: its rows are the
  samples, each holding a media value in ``media_column`` (a ``{"bytes", "path"}`` dict, a
  path or URL, or bytes) and a label in ``label_column``.

Files come in sorted path order, each once, so sample indices are stable from run to run.

A dataset is returned as it is, with only its two columns selected, never copied into a
list: flowdata uses a sized, indexable source value (a map-style ``Dataset``) as its index,
so rows are read only in the workers that decode them, and streams an ``IterableDataset``.
An ``Image`` or ``Audio`` column that decodes is cast to ``decode=False``: the workers
decode its bytes with ``flowdata.media``, with its checks and errors (and ``datasets`` needs
torchcodec to decode audio).
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import logging
import os
import sys
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from flowdata.io import NotAFile, open_regular
from flowdata.stats import Vocab, Vocabulary

_log = logging.getLogger("flowdata")


def read_manifest(
    manifest: object, suffixes: Collection[str] = (), media_column: str = "path", label_column: str = "label",
) -> Iterable[dict[str, Any]]:
    """The samples: a dataset's rows (see the module docstring), or one ``{"path", "label"}``
    row per file of a CSV, folder or pattern, paths absolute."""
    dataset = _dataset(manifest)
    if dataset is not None:
        return _dataset_rows(dataset, media_column, label_column)
    if not isinstance(manifest, (str, os.PathLike)):
        raise TypeError(
            f"manifest must be the path of a CSV file, a folder or a glob pattern, or a datasets.Dataset or "
            f"datasets.IterableDataset, got {type(manifest).__name__}"
        )
    return _file_rows(os.fspath(manifest), suffixes)


def class_names(manifest: object, label_column: str = "label") -> tuple[str, ...] | None:
    """The names of a dataset's ``ClassLabel`` label column, in the dataset's order; None otherwise."""
    dataset = _dataset(manifest)
    features = None if dataset is None else dataset.features
    if features is None or label_column not in features:
        return None
    feature = features[label_column]
    if isinstance(feature, sys.modules["datasets"].ClassLabel):
        return tuple(str(name) for name in feature.names)
    return None


def media_of(row: Mapping[str, Any], media_column: str) -> Any:
    """A row's media value: its ``media_column`` (a dataset's row), or its ``"path"`` (a file's row)."""
    if media_column in row:
        return row[media_column]
    if "path" in row:
        return row["path"]
    raise ValueError(_no_column([(media_column, "media_column")], list(row), "the row"))


def label_of(row: Mapping[str, Any], label_column: str, names: Sequence[str] | None) -> str:
    """A row's label as a string: a ``ClassLabel``'s name, or the value (a string, or a number as written)."""
    if label_column in row:
        value = row[label_column]
    elif "label" in row:
        value = row["label"]
    else:
        raise ValueError(_no_column([(label_column, "label_column")], list(row), "the row"))
    if names is not None:
        if isinstance(value, (int, np.integer)) and 0 <= value < len(names):
            return names[int(value)]
        raise ValueError(
            f"label {value!r} in column {label_column!r} is not one of the {len(names)} classes of its ClassLabel "
            "(-1 marks a row without a label, as in a test split)\n"
            f"  fix: drop the unlabelled rows, ds.filter(lambda r: r[{label_column!r}] >= 0), or skip them with "
            "on_error='skip'"
        )
    if value is None:
        raise ValueError(f"the row has no label (None in column {label_column!r})\n"
                         "  fix: drop the rows without labels, or skip them with on_error='skip'")
    return value if isinstance(value, str) else str(value)


class LabelVocabulary(Vocabulary):
    """Counts labels, like :class:`~flowdata.stats.Vocabulary`; given ``class_names`` (a
    ``ClassLabel``'s), the vocabulary is those names, in that order, with their counts, so
    the labels keep the dataset's own numbers.

    Args:
        class_names: The names, or None to order the labels by count.
    """

    def __init__(self, class_names: Sequence[str] | None = None):
        super().__init__()
        self.class_names = None if class_names is None else tuple(class_names)

    def merge(self, other: Vocabulary) -> LabelVocabulary:
        """Adds another vocabulary's counts; returns self."""
        super().merge(other)
        return self

    def result(self) -> Vocab:
        """The class names with their counts, or the labels most frequent first."""
        if self.class_names is None:
            return super().result()
        return Vocab(self.class_names, tuple(self.counts[name] for name in self.class_names))

    def state_dict(self) -> dict[str, np.ndarray]:
        """The counts, and the class names (none: ``has_names`` False)."""
        state = super().state_dict()
        state["class_names"] = np.array(self.class_names or (), dtype=str)
        state["has_names"] = np.array(self.class_names is not None)
        return state

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> LabelVocabulary:
        """A LabelVocabulary restored from :meth:`state_dict`."""
        names = [str(n) for n in np.asarray(state["class_names"])] if bool(np.asarray(state["has_names"])) else None
        v = cls(names)
        v.counts = Vocabulary.from_state_dict(state).counts
        return v


def _dataset(value: object) -> Any:
    """``value`` when it is a ``datasets.Dataset`` or ``IterableDataset``; None otherwise.

    ``datasets`` is never imported here: a dataset can only come from a process that did.
    """
    datasets = sys.modules.get("datasets")
    if datasets is None:
        return None
    if isinstance(value, (datasets.Dataset, datasets.IterableDataset)):
        return value
    if isinstance(value, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise TypeError(
            f"manifest is a {type(value).__name__} of splits ({', '.join(value)}); give one split, "
            f"e.g. inputs={{'manifest': ds[{next(iter(value), 'train')!r}]}}"
        )
    return None


def _dataset_rows(dataset: Any, media_column: str, label_column: str) -> Iterable[dict[str, Any]]:
    features = dataset.features
    if features is None:  # an IterableDataset from a generator: its rows are checked one by one
        return cast("Iterable[dict[str, Any]]", dataset)
    missing = [(c, what) for c, what in ((media_column, "media_column"), (label_column, "label_column"))
               if c not in features]
    if missing:
        raise ValueError(_no_column(missing, list(features), "the dataset", features))
    columns = list(dict.fromkeys((media_column, label_column)))
    dataset = dataset.select_columns(columns)
    feature = features[media_column]
    datasets = sys.modules["datasets"]
    if isinstance(feature, (datasets.Image, datasets.Audio)) and feature.decode:
        dataset = dataset.cast_column(media_column, dataclasses.replace(feature, decode=False))
    return cast("Iterable[dict[str, Any]]", dataset)


def _no_column(missing: list[tuple[str, str]], columns: list[str], where: str,
               features: Mapping[str, Any] | None = None) -> str:
    """Names the missing ``(column, option)`` pairs, the columns there are, and the config that fixes it."""
    names = " nor ".join(f"{column!r} ({option})" for column, option in missing)
    config = ", ".join(f"{option!r}: {(_likely(features, option) if features else None) or '...'!r}"
                       for _, option in missing)
    return (
        f"{where} has no column {names}; its columns: {', '.join(map(repr, columns)) or 'none'}\n"
        f"  fix: name the column{'s' if len(missing) > 1 else ''} in the config, Builder().with_config({{{config}}})"
    )


def _likely(features: Mapping[str, Any], option: str) -> str | None:
    """The column an option probably means: the one Image/Audio column, or the one ClassLabel column."""
    datasets = sys.modules["datasets"]
    kinds = (datasets.Image, datasets.Audio) if option == "media_column" else (datasets.ClassLabel,)
    found = [name for name, feature in features.items() if isinstance(feature, kinds)]
    return found[0] if len(found) == 1 else None


def _file_rows(manifest: str, suffixes: Collection[str]) -> Iterator[dict[str, str]]:
    """One ``{"path", "label"}`` row per file of a CSV, folder or pattern, paths absolute."""
    if os.path.isdir(manifest):
        yield from _folder(manifest, suffixes)
        return
    if not os.path.exists(manifest) and glob.has_magic(manifest):  # "data[v2]/train.csv" is a CSV
        yield from _pattern(manifest, suffixes)
        return
    folder = os.path.dirname(os.path.abspath(manifest))
    try:  # a FIFO or a device is refused, never opened: reading one could wait forever
        f = open_regular(manifest, "r", newline="", encoding="utf-8-sig")  # a BOM (Excel) is not part of "path"
    except NotAFile as exc:
        raise ValueError(f"{manifest}: the manifest is {exc.kind}, not a regular file\n"
                         "  fix: give a path,label CSV file, a folder of class folders or a glob pattern") from None
    with f:
        reader = csv.DictReader(f)
        missing = {"path", "label"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(
                f"{manifest}: the manifest needs columns path,label (missing {', '.join(sorted(missing))}); "
                "or give a folder or a glob pattern, labelled by each file's folder"
            )
        for line in reader:
            yield {"path": os.path.join(folder, line["path"]), "label": line["label"]}


def _folder(root: str, suffixes: Collection[str]) -> Iterator[dict[str, str]]:
    top = os.path.abspath(root)
    found: list[str] = []
    loose: list[str] = []
    seen_dirs: set[str] = set()
    loops: list[str] = []
    for folder, dirs, names in os.walk(top, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen_dirs:  # a link back to a folder already walked (a loop, or a second way in)
            loops.append(folder)
            dirs[:] = []
            continue
        seen_dirs.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # walked in sorted order
        files = [os.path.join(folder, n) for n in names if not n.startswith(".") and _wanted(n, suffixes)]
        (loose if folder == top else found).extend(files)
    if loops:
        _log.warning("%s: %d folder(s) reached again through a symbolic link were skipped, e.g. %s",
                     root, len(loops), min(loops))
    if loose:
        raise ValueError(
            f"{root}: {len(loose)} file(s) directly in the folder have no label, e.g. {min(loose)}\n"
            "  fix: put every file in a class folder (root/<label>/...), or list them in a path,label CSV"
        )
    if not found:
        raise ValueError(_nothing(root, suffixes))
    files_seen: set[str] = set()
    for path in sorted(found):
        real = os.path.realpath(path)
        if real in files_seen:  # one real file, reached twice through links: once, first way in
            continue
        files_seen.add(real)
        yield {"path": path, "label": os.path.relpath(path, top).split(os.sep)[0]}


def _pattern(pattern: str, suffixes: Collection[str]) -> Iterator[dict[str, str]]:
    found = sorted({os.path.abspath(p) for p in glob.iglob(pattern, recursive=True)
                    if os.path.isfile(p) and _wanted(p, suffixes)})
    if not found:
        raise ValueError(_nothing(pattern, suffixes))
    for path in found:
        yield {"path": path, "label": os.path.basename(os.path.dirname(path))}


def _wanted(name: str, suffixes: Collection[str]) -> bool:
    return os.path.splitext(name)[1].lower() in suffixes


def _nothing(where: str, suffixes: Collection[str]) -> str:
    return (
        f"{where}: no files found with a suffix in {', '.join(sorted(suffixes))}\n"
        "  fix: check the folder or pattern, or list the files in a path,label CSV"
    )
