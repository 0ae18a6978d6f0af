"""A ``Sequential`` source: read in order, never indexed, its statistics pass run here.

A row marked ``broken`` stands for an item that cannot be read: the source raises there.
"""

from __future__ import annotations

from typing import Any

from flowdata import Sequential


def row(data: Any) -> Sequential[dict]:
    for r in data:
        if r.get("broken"):
            raise OSError(f"cannot read row {r['x']}")
        yield r
