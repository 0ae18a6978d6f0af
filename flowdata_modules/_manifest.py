"""Reading a ``path,label`` manifest (a private helper of the bundled modules)."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator


def read_manifest(manifest: str) -> Iterator[dict[str, str]]:
    """One ``{"path", "label"}`` row per line; paths made absolute against the CSV's folder."""
    folder = os.path.dirname(os.path.abspath(manifest))
    with open(manifest, newline="", encoding="utf-8-sig") as f:  # a BOM (Excel) is not part of "path"
        reader = csv.DictReader(f)
        missing = {"path", "label"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{manifest}: the manifest needs columns path,label (missing {', '.join(sorted(missing))})")
        for line in reader:
            yield {"path": os.path.join(folder, line["path"]), "label": line["label"]}
