"""A Hamilton module, unchanged: Parallelizable[T] and Hamilton's Collect[T]."""

from hamilton.htypes import Collect, Parallelizable

CASES = [{"urls": ["a.com/x", "bb.org/yy", "c.net/"]}, {"urls": [f"site{i}.com/{'p' * (i % 4)}" for i in range(150)]}]
OUTPUTS = ["total_length", "domains"]


def url(urls: list[str]) -> Parallelizable[str]:
    for u in urls:
        yield u


def domain(url: str) -> str:
    return url.split("/")[0]


def url_length(url: str) -> int:
    return len(url)


def total_length(url_length: Collect[int]) -> int:
    return sum(url_length)


def domains(domain: Collect[str]) -> list[str]:
    return sorted(set(domain))


def _oracle(urls: list[str]) -> dict[str, object]:
    return {"total_length": sum(len(u) for u in urls), "domains": sorted({u.split("/")[0] for u in urls})}


LOADER_OUTPUTS = ["domain", "url_length"]


def _loader_oracle(urls: list[str]) -> dict[str, list[object]]:
    return {"domain": [u.split("/")[0] for u in urls], "url_length": [len(u) for u in urls]}
