"""A chained group: the source ``row`` collects the group ``raw`` and opens its own."""

from __future__ import annotations

from typing import Any

from flowdata import Collect, Parallel


def raw(data: Any) -> Parallel[dict]:
    return data


def raw_row(raw: dict) -> dict:
    return dict(raw)


def row(raw_row: Collect[dict]) -> Parallel[dict]:
    yield from raw_row
