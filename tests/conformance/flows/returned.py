"""A source that returns its input as it is: a sized sequence or a stream in shards."""

from __future__ import annotations

from typing import Any

from flowdata import Parallel


def row(data: Any) -> Parallel[dict]:
    return data
