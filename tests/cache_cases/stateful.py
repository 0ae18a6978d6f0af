"""Nodes whose keys must see state, values of every kind (tests/run/caching/test_keys.py, test_codec.py).

``CALLS`` records every sample a cached node computed in this process (a module-level list:
keyed by its type only, so that appending to it never changes a key).
"""

from __future__ import annotations

import dataclasses
import enum
from collections import OrderedDict, namedtuple
from typing import Any

import numpy as np
import torch

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Vocab, Vocabulary, Welford

CALLS: list[str] = []

# --- a node reading a reduction's Vocab ------------------------------------------------------


def i(n: int) -> Parallel[int]:
    yield from range(n)


def word(i: int) -> str:
    return ("a", "b", "b", "c", "c", "c")[i % 6]


@reduce(Vocabulary)
def vocab(word: Collect[str]) -> Vocab:
    ...


def word_id(word: str, vocab: Vocab) -> int:
    CALLS.append(f"word_id {word}")
    return vocab[word]


# --- state the key must see: a module-level encoder, tensor, array, instance, dataclass ------

ENCODER = torch.nn.Linear(1, 1, bias=False)
OFFSET = torch.zeros(1)
TABLE = np.zeros(3)


class Scaler:
    """A user object whose attribute the node reads through a method."""

    def __init__(self, gain: float):
        self.gain = gain

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        return v * self.gain


@dataclasses.dataclass
class Options:
    shift: float = 0.0


SCALER = Scaler(1.0)
OPTIONS = Options()


def x(n: int) -> Parallel[float]:
    yield from (float(i) for i in range(n))


def code(x: float) -> torch.Tensor:
    CALLS.append(f"code {x}")
    with torch.no_grad():
        out = ENCODER(torch.tensor([x])) + OFFSET + float(TABLE[int(x) % 3])
    return SCALER(out) + OPTIONS.shift


@reduce(Welford)
def code_stats(code: Collect[torch.Tensor]) -> Stats:
    ...


def centred(code: torch.Tensor, code_stats: Stats) -> torch.Tensor:
    CALLS.append("centred")
    return code - code_stats.mean


# --- what the key cannot see: an open handle ------------------------------------------------

LOG = open(__file__, encoding="utf-8")  # noqa: SIM115 -- an open handle a helper reads


def _peek() -> int:
    LOG.seek(0)
    return len(LOG.readline())


def logged(x: float) -> float:
    return x + 0 * _peek()


def late(logged: float, code_stats: Stats) -> float:
    return logged - float(code_stats.mean)


def tagged(x: float, tag: Any) -> float:
    return x


@reduce(Welford)
def logged_stats(logged: Collect[float]) -> Stats:
    ...


# --- values that must come back as they went ------------------------------------------------


class Color(enum.IntEnum):
    RED = 1
    GREEN = 2


class Shade(enum.Enum):
    DARK = "dark"


Point = namedtuple("Point", "x y")


@dataclasses.dataclass
class Box:
    w: int


def _structured() -> np.ndarray:
    out = np.zeros(3, dtype=[("id", "<i4"), ("pos", "<f8", (2,)), ("tag", "S2")])
    out["id"], out["pos"], out["tag"] = [1, 2, 3], [[0.5, 1], [2, 3], [4, 5]], [b"ab", b"c", b""]
    return out


KINDS: dict[str, Any] = {
    # the kinds docs/caching.md lists, each with what may go wrong in a round trip
    "tensor": lambda: torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "bfloat16 tensor": lambda: torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
    "bool tensor": lambda: torch.tensor([True, False]),
    "0-d tensor": lambda: torch.tensor(7, dtype=torch.int16),
    "empty tensor": lambda: torch.zeros(0, 4),
    "conjugate tensor": lambda: torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj(),
    "negative view": lambda: torch.tensor([1 + 2j, 3 - 1j]).conj().imag,
    "transposed tensor": lambda: torch.arange(6.0).reshape(2, 3).t(),
    "sparse COO tensor": lambda: torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse(),
    "sparse CSR tensor": lambda: torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse_csr(),
    "tensor requiring grad": lambda: torch.ones(2, requires_grad=True),
    "array": lambda: np.arange(6, dtype=">i2").reshape(3, 2),
    "structured array": _structured,
    "datetime array": lambda: np.array(["2024-01-01", "2024-06-30"], dtype="datetime64[D]"),
    "unicode array": lambda: np.array(["ab", "c"]),
    "float64 scalar": lambda: np.float64(1.5),
    "int8 scalar": lambda: np.int8(-3),
    "bool scalar": lambda: np.bool_(True),
    "structured scalar": lambda: _structured()[1],
    "int": lambda: 2**70,
    "float": lambda: -0.0,
    "nan": lambda: float("nan"),
    "complex": lambda: 1.5 - 2j,
    "str": lambda: "héllo\u2028",
    "bytes": lambda: b"\x00\xff",
    "bytearray": lambda: bytearray(b"ab"),
    "bool": lambda: True,
    "None": lambda: None,
    "IntEnum": lambda: Color.GREEN,
    "Enum": lambda: Shade.DARK,
    "namedtuple": lambda: Point(1, np.float32(2.5)),
    "nested": lambda: {"a": [1, (2.0, None)], "b": {"c": torch.ones(1)}, "": ()},
}

REFUSED: dict[str, Any] = {
    "OrderedDict": lambda: OrderedDict(a=1),
    "dataclass": lambda: Box(1),
    "object array": lambda: np.array([1, "a"], dtype=object),
    "quantized tensor": lambda: torch.quantize_per_tensor(torch.ones(2), 0.5, 0, torch.qint8),
    "dict with int keys": lambda: {1: "a"},
}


def value(x: float, kind: str) -> Any:
    CALLS.append(f"value {kind}")
    return KINDS[kind]() if kind in KINDS else REFUSED[kind]()


def values(value: Collect[Any]) -> list[Any]:
    return list(value)
