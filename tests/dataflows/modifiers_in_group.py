"""Hamilton function modifiers on per-sample nodes: extract_fields and parameterize."""

from hamilton.function_modifiers import extract_fields, parameterize, source, value

from flowdata import Collect, Parallel

CASES = [{"rows": [(1, 2.0), (3, 4.5), (5, -1.0)]}, {"rows": [(i, i / 7) for i in range(400)]}]
OUTPUTS = ["id_sum", "score_sum", "scaled_sums"]


def row(rows: list[tuple[int, float]]) -> Parallel[tuple[int, float]]:
    yield from rows


@extract_fields({"row_id": int, "score": float})
def fields(row: tuple[int, float]) -> dict[str, object]:
    return {"row_id": row[0], "score": row[1]}


@parameterize(
    score_x2={"score": source("score"), "factor": value(2.0)},
    score_x10={"score": source("score"), "factor": value(10.0)},
)
def scaled(score: float, factor: float) -> float:
    return score * factor


def id_sum(row_id: Collect[int]) -> int:
    return sum(row_id)


def score_sum(score: Collect[float]) -> float:
    return round(sum(score), 9)


def scaled_sums(score_x2: Collect[float], score_x10: Collect[float]) -> tuple[float, float]:
    a = b = 0.0
    for x, y in zip(score_x2, score_x10, strict=True):
        a += x
        b += y
    return round(a, 9), round(b, 9)


def _oracle(rows: list[tuple[int, float]]) -> dict[str, object]:
    a = b = 0.0
    for _, s in rows:
        a += s * 2.0
        b += s * 10.0
    return {
        "id_sum": sum(r[0] for r in rows),
        "score_sum": round(sum(r[1] for r in rows), 9),
        "scaled_sums": (round(a, 9), round(b, 9)),
    }


LOADER_OUTPUTS = ["row_id", "score_x10"]


def _loader_oracle(rows: list[tuple[int, float]]) -> dict[str, list[object]]:
    return {"row_id": [r[0] for r in rows], "score_x10": [r[1] * 10.0 for r in rows]}
