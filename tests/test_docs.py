"""The documentation's command transcripts print what the pages say (a first step of the
doc tests): every ``flowdata check`` transcript of errors.md, run on the files exactly as
the page shows them (``tests/doc_blocks.py``; its ``--update`` mode rewrites a page's
transcripts from what the commands print). Pages whose blocks use files of other pages
(cli.md) are not collected yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_blocks import ROOT, normalise, play

PAGES = {
    "docs/errors.md": ("flowdata check",),
}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_transcripts_of_a_page(page: str, tmp_path: Path) -> None:
    results = play(ROOT / page, tmp_path, PAGES[page])
    assert len(results) >= 5  # the page's transcripts were found and run
    wrong = [f"{page}:{block.line}: $ {step.command}\n--- the page says\n{step.expected}\n--- it prints\n{got}"
             for block, step, got in results if normalise(got) != normalise(step.expected)]
    assert not wrong, "\n\n".join(wrong) + "\n\n(fix: .venv/bin/python -m tests.doc_blocks --update " + page + ")"
