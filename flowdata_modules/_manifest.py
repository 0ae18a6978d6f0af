"""Reading a manifest (a private helper of the bundled modules).

A manifest is either

- a CSV file with columns ``path,label`` (other columns ignored), paths relative to the
  CSV's folder; or
- a folder: every file with one of the module's ``suffixes`` below it (symbolic links
  followed, each real file and folder visited once -- a link loop is skipped with one
  warning --, hidden files and folders left out), labelled by the **class folder** it is
  reached through first in sorted order: the first folder under the root (``train/dog/001.wav`` and ``train/dog/x/002.wav`` ->
  ``dog``), as torchvision's ``ImageFolder`` does; a file directly in the root has no
  label and is an error;
- a glob pattern (``*``, ``?``, ``[``; ``**`` crosses folders) that names no existing
  file: the matching files with one of the ``suffixes``, each labelled by the folder that
  holds it.

Files come in sorted path order, each once, so sample indices are stable from run to run.
"""

from __future__ import annotations

import csv
import glob
import logging
import os
from collections.abc import Collection, Iterator

_log = logging.getLogger("flowdata")


def read_manifest(manifest: str, suffixes: Collection[str] = ()) -> Iterator[dict[str, str]]:
    """One ``{"path", "label"}`` row per sample, paths absolute."""
    if os.path.isdir(manifest):
        yield from _folder(manifest, suffixes)
        return
    if not os.path.exists(manifest) and glob.has_magic(manifest):  # "data[v2]/train.csv" is a CSV
        yield from _pattern(manifest, suffixes)
        return
    folder = os.path.dirname(os.path.abspath(manifest))
    with open(manifest, newline="", encoding="utf-8-sig") as f:  # a BOM (Excel) is not part of "path"
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
