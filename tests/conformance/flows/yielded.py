"""A generator source (indexed into Arrow, or streamed with ``streaming=True``).

A row marked ``broken`` stands for an item that cannot be read: the source raises there.
"""

from __future__ import annotations

from typing import Any

from flowdata import Parallel


def row(data: Any) -> Parallel[dict]:
    for r in data:
        if r.get("broken"):
            raise OSError(f"cannot read row {r['x']}")
        yield r
