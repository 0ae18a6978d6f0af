"""Small values of every kind a column record holds, and a few it does not (tests/run/caching/test_column_records.py).

``value`` returns sample ``i``'s value of the configured ``kind`` -- ragged kinds vary in
length from sample to sample -- and records each call in ``CALLS``; ``rows`` is a
``@vectorized`` node returning one tensor for its chunk (a column node); ``sized`` reads a
file that a table's cell names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch

from flowdata import Collect, Parallel, vectorized

CALLS: list[str] = []

PACKED: dict[str, Any] = {  # kind -> sample i's value; each kind is packed into one record per chunk
    "float32 tensor [3]": lambda i: torch.arange(3, dtype=torch.float32) / 7 + i,
    "bfloat16 tensor [2, 2]": lambda i: (torch.arange(4, dtype=torch.float32).reshape(2, 2) * i / 3).bfloat16(),
    "bool tensor": lambda i: torch.tensor([i % 2 == 0, i % 3 == 0]),
    "0-d int64 tensor": lambda i: torch.tensor(i * 1_000_003),
    "transposed tensor": lambda i: (torch.arange(6.0).reshape(2, 3) + i).t(),
    "ragged int16 tensor": lambda i: torch.arange(i % 5, dtype=torch.int16) - i,
    "ragged [k, 2] tensor": lambda i: torch.full((i % 3, 2), float(i)),
    "list of ints": lambda i: [] if i % 4 == 0 else [j * 7919 - i for j in range(i % 9)],
    "list of big ints": lambda i: [2**62 + i, -(2**62), i],
    "list of floats": lambda i: [float("nan"), -0.0, i / 3, float("inf")][: i % 5],
    "big-endian array": lambda i: np.arange(6, dtype=">i2").reshape(3, 2) * i,
    "datetime array": lambda i: np.array([i, 2 * i], dtype="datetime64[s]"),
    "unicode array": lambda i: np.array(["ab", "c" * (i % 2)]),
    "0-d array": lambda i: np.array(i * 1.5),
    "ragged float64 array": lambda i: np.linspace(0, 1, i % 6),
    "float32 scalar": lambda i: np.float32(i) / np.float32(3),
    "int": lambda i: i * 2**40 - 5,
    "float": lambda i: -0.0 if i == 0 else i / 7,
    "bool": lambda i: i % 3 == 1,
    "str": lambda i: "é\u2028" * (i % 4) + ("\ud800" if i == 5 else "") + str(i),
    "bytes": lambda i: bytes(range(i % 7)),
}

LOOSE: dict[str, Any] = {  # kind -> sample i's value; stored one record per value, as before
    "a large tensor": lambda i: torch.full((1500,), float(i)),  # 6,000 bytes: over SMALL
    "ints and floats": lambda i: [i, i / 2],
    "an int past int64": lambda i: 2**70 + i,
    "a dict": lambda i: {"i": i, "half": i / 2},
    "a tensor requiring grad": lambda i: torch.ones(2, requires_grad=True) * 1.0,
}


def i(n: int) -> Parallel[int]:
    yield from range(n)


def value(i: int, kind: str) -> Any:
    CALLS.append(f"value {i}")
    return PACKED[kind](i) if kind in PACKED else LOOSE[kind](i)


def values(value: Collect[Any]) -> list[Any]:
    return list(value)


@vectorized
def rows(i: list[int]) -> torch.Tensor:
    """One float64 tensor [n, 4] for the chunk (a column)."""
    CALLS.extend(f"rows {k}" for k in i)
    return torch.arange(4, dtype=torch.float64) + torch.tensor(i, dtype=torch.float64)[:, None] / 3


@vectorized
def doubled(rows: torch.Tensor) -> torch.Tensor:
    """A columnar consumer: the chunk's rows as one tensor."""
    return rows * 2


def entry(table: pa.Table) -> Parallel[dict[str, Any]]:
    """A table's rows (``path``, ``n``)."""
    return table  # type: ignore[return-value]


def sized(entry: dict[str, Any]) -> int:
    """The size of the file the row names, plus its ``n``."""
    CALLS.append(f"sized {entry['n']}")
    with open(entry["path"], "rb") as f:
        return len(f.read()) + int(entry["n"])


def sizes(sized: Collect[int]) -> list[int]:
    return list(sized)
