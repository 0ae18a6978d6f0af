"""The one compatibility function: accepts what users expect, rejects real mismatches."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, NewType, Optional, TypeVar

import numpy as np
import pytest
import torch

from flowdata.typecheck import collection_element, compatible, type_name


class Base: ...


class Sub(Base): ...


UserId = NewType("UserId", int)
OtherId = NewType("OtherId", int)
T = TypeVar("T")

ACCEPT = [
    (int, float),
    (int, complex),
    (bool, int),
    (Sub, Base),
    (list[Sub], Sequence[Base]),
    (list[Sub], list[Base]),
    (list[int], Iterable[float]),
    (list[int], list),
    (list, list[int]),
    (dict[str, list[int]], Mapping[str, Sequence[int]]),
    (dict[str, int], Iterable[str]),
    (tuple[int, int], tuple[int, ...]),
    (tuple[int, ...], Sequence[int]),
    (tuple[int, str], tuple[int, str]),
    (int, Optional[int]),
    (None, Optional[int]),
    (int | str, int | str | None),
    (int, Any),
    (Any, int),
    (int, object),
    (Annotated[int, "meta"], int),
    (int, Annotated[float, "meta"]),
    (UserId, int),
    (UserId, UserId),
    (torch.Tensor, torch.Tensor),
    (torch.nn.Parameter, torch.Tensor),
    (np.ndarray, np.ndarray),
    (np.float32, np.floating),
    (Literal["a", "b"], str),
    (Literal["a"], Literal["a", "b"]),
    (int, T),
    ("SomeForwardRef", int),
]

REJECT = [
    (list[int], list[str]),
    (float, int),
    (str, int),
    (Base, Sub),
    (Optional[int], int),
    (int | str, int),
    (int, UserId),
    (OtherId, UserId),
    (dict[str, int], dict[str, str]),
    (tuple[int, str], tuple[int, int]),
    (tuple[int, ...], tuple[int, int]),
    (np.ndarray, torch.Tensor),
    (torch.Tensor, np.ndarray),
    (Literal["c"], Literal["a", "b"]),
    (str, Literal["a"]),
    (None, int),
    (int, None),
]


@pytest.mark.parametrize(("produced", "expected"), ACCEPT, ids=lambda t: type_name(t))
def test_accepts(produced: Any, expected: Any) -> None:
    assert compatible(produced, expected)


@pytest.mark.parametrize(("produced", "expected"), REJECT, ids=lambda t: type_name(t))
def test_rejects(produced: Any, expected: Any) -> None:
    assert not compatible(produced, expected)


def test_type_names_are_readable() -> None:
    assert type_name(dict[str, list[int]]) == "dict[str, list[int]]"
    assert type_name(Optional[int]) == "int | None"
    assert type_name(torch.Tensor) == "torch.Tensor"
    assert type_name(np.ndarray) == "numpy.ndarray"
    assert type_name(UserId) == "UserId"
    assert type_name(Annotated[int, "x"]) == "int"
    assert type_name(Sequence[Base]) == "Sequence[tests.compile.test_typecheck.Base]"  # where it can be imported from


def test_collection_element() -> None:
    assert collection_element(list[int]) is int
    assert collection_element(Iterable[str]) is str
    assert collection_element(tuple[int, ...]) is int
    assert collection_element(tuple[int, str]) is None
    assert collection_element(int) is None
    assert collection_element(list) is Any


def test_mismatch_message_names_both_functions(build: object) -> None:
    import flowdata as fd

    src = """
    def count() -> int:
        return 1
    def label(count: str) -> str:
        return count
    """
    with pytest.raises(fd.GraphError, match=r"FD101 type-mismatch: 'label' expects 'count' as str, but node 'count' returns int") as info:
        build(src)  # type: ignore[operator]
    (p,) = info.value.problems
    assert (p.expected, p.actual) == ("str", "int")
    assert len(p.locations) == 2 and p.locations[0].endswith(":4") and p.locations[1].endswith(":2")
