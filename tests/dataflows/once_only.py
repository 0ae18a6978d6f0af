"""No group at all: once nodes, inputs with defaults, and a node reading a config value."""

from flowdata import Collect, Parallel

CASES = [{"a": 2}, {"a": 5, "b": 10}]
OUTPUTS = ["product", "report"]


def product(a: int, b: int = 3) -> int:
    return a * b


def report(product: int, unit: str = "m") -> str:
    return f"{product}{unit}"


def unused_source(never_given: list[int]) -> Parallel[int]:
    raise AssertionError("not needed by the outputs: must never run")


def unused_total(unused_source: Collect[int]) -> int:
    raise AssertionError("must never run")


def _oracle(a: int, b: int = 3) -> dict[str, object]:
    return {"product": a * b, "report": f"{a * b}m"}
