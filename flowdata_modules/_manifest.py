"""Reading a manifest (a private helper of the bundled modules).

A manifest is either

- a CSV file with columns ``path,label`` (other columns ignored), paths relative to the
  CSV's folder; or
- a folder, or a glob pattern (``*``, ``?``, ``[``; ``**`` crosses folders), naming the
  files directly: each file's label is the name of the folder that holds it
  (``train/dog/001.wav`` -> ``dog``), as torchvision's ``ImageFolder`` does. A folder is
  searched recursively for files with one of the module's ``suffixes``. Files come in
  sorted path order, so sample indices are stable from run to run.
"""

from __future__ import annotations

import csv
import glob
import os
from collections.abc import Collection, Iterator


def read_manifest(manifest: str, suffixes: Collection[str] = ()) -> Iterator[dict[str, str]]:
    """One ``{"path", "label"}`` row per sample, paths absolute."""
    if os.path.isdir(manifest) or glob.has_magic(manifest):
        yield from _listed(manifest, suffixes)
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


def _listed(manifest: str, suffixes: Collection[str]) -> Iterator[dict[str, str]]:
    if os.path.isdir(manifest):
        paths = (
            os.path.join(root, name)
            for root, _, names in os.walk(manifest)
            for name in names
            if os.path.splitext(name)[1].lower() in suffixes
        )
    else:
        paths = (p for p in glob.iglob(manifest, recursive=True) if os.path.isfile(p))
    found = sorted(os.path.abspath(p) for p in paths)
    if not found:
        wanted = f" with a suffix in {', '.join(sorted(suffixes))}" if os.path.isdir(manifest) else ""
        raise ValueError(f"{manifest}: no files found{wanted}")
    for path in found:
        yield {"path": path, "label": os.path.basename(os.path.dirname(path))}
