"""The documentation's command transcripts print what the pages say (a first step of the
doc tests): every ``flowdata check`` transcript of errors.md, and every ``flowdata`` and
``python`` transcript of cli.md, index.md (the quick start), reliability.md and hamilton.md,
run on the files exactly as the pages show them (``tests/doc_blocks.py``, whose
``--update`` mode rewrites a page's transcripts from what the commands print). Pages whose blocks use files of other pages
are played after those pages' files are written (cli.md uses index.md's and errors.md's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_blocks import PAGES, normalise, play_page


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_transcripts_of_a_page(page: str, tmp_path: Path) -> None:
    results = play_page(page, tmp_path)
    assert results  # the page's transcripts were found and run
    wrong = [f"{page}:{block.line}: $ {step.command}\n--- the page says\n{step.expected}\n--- it prints\n{got}"
             for block, step, got in results if normalise(got) != normalise(step.expected)]
    assert not wrong, "\n\n".join(wrong) + "\n\n(fix: .venv/bin/python -m tests.doc_blocks --update " + page + ")"
