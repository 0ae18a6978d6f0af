"""The documentation is tested: every code block of README.md and
docs/*.md is run as the page shows it, in order, in a temporary folder, and what it prints
is compared with what the page says (``tests/doc_blocks.py`` has the rules; its
``--update`` mode rewrites a page's outputs from what the blocks print, so quoted output is
produced, never typed). Signature lists are compared with the real signatures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_blocks import Played, matches, pages, play_page

pytestmark = pytest.mark.docs  # runs every page of docs/ and the README


def _wrong(page: str, results: list[Played]) -> list[str]:
    return [f"{page}:{r.block.line}: {r.command}\n--- the page says\n{r.expected}\n--- it prints\n{r.got}"
            for r in results if not matches(r.expected, r.got)]


@pytest.mark.parametrize("page", pages())
def test_the_blocks_of_a_page_print_what_it_says(page: str, tmp_path: Path) -> None:
    results = play_page(page, tmp_path)
    if page != "docs/changelog.md":
        assert results  # the page's blocks were found and run
    wrong = _wrong(page, results)
    assert not wrong, "\n\n".join(wrong) + "\n\n(fix: .venv/bin/python -m tests.doc_blocks --update " + page + ")"
