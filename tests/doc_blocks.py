"""The code blocks of a documentation page, run as the page shows them.

A page's fenced blocks are read in order. A ```` ```python ```` block whose first line is
``# name.py`` is a file: it is written, exactly as shown (that first line included, so the
line numbers a command prints are those of the block), into the page's folder. A plain
```` ``` ```` block whose lines start with ``$ `` is a transcript: each ``$ command`` runs in
that folder (``flowdata`` is the installed command), and the lines up to the next ``$ `` are
what it prints (stdout and stderr as a terminal interleaves them); ``$ echo $?`` prints the
status of the command before it.

Outputs are compared after :func:`normalise` (memory addresses). Run as a script, it
rewrites the transcripts of a page with what the commands print, so quoted output is
produced, never typed::

    .venv/bin/python -m tests.doc_blocks --update docs/errors.md
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, text and where it starts in the page (1-based)."""

    lang: str
    text: str
    line: int
    start: int  # offset of the text in the page
    end: int


@dataclass(frozen=True)
class Step:
    """One ``$ command`` of a transcript and the output the page shows for it."""

    command: str
    expected: str


def blocks(page: str) -> list[Block]:
    """The fenced blocks of a page, in order."""
    return [Block(m.group(1), m.group(2), page[: m.start()].count("\n") + 1, m.start(2), m.end(2))
            for m in _FENCE.finditer(page)]


def steps(transcript: str) -> list[Step]:
    """The commands of a transcript block and their shown outputs."""
    out: list[Step] = []
    for part in re.split(r"^(?=\$ )", transcript, flags=re.M):
        if not part.startswith("$ "):
            continue
        command, _, shown = part[2:].partition("\n")
        out.append(Step(command, shown.rstrip("\n")))
    return out


def normalise(text: str, folder: Path | None = None, shown: str = "") -> str:
    """Output with what changes from run to run replaced: memory addresses, and the folder
    the blocks ran in (as ``shown``, the folder the page names)."""
    if folder is not None:
        text = text.replace(str(folder), shown)
    return re.sub(r"0x[0-9a-f]{6,}", "0x...", text)


def shown_folder(page_path: Path) -> str:
    """The folder a page's outputs name: ``/tmp/fdd/<page>``."""
    return f"/tmp/fdd/{page_path.stem}"


def run(command: str, folder: Path, last_status: int) -> tuple[str, int]:
    """What ``command`` prints in ``folder`` (stdout and stderr interleaved, as a terminal
    shows them), and its status."""
    if command.strip() == "echo $?":
        return str(last_status), 0
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as in a shell of the user's
    env.update(PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")
    done = subprocess.run(["bash", "-c", command], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, timeout=300)
    return done.stdout.rstrip("\n"), done.returncode


def write_files(page_path: Path, folder: Path) -> None:
    """Writes a page's file blocks into ``folder`` (for a page that uses them)."""
    for block in blocks(page_path.read_text()):
        name = re.fullmatch(r"# ([\w/]+\.py)", block.text.split("\n", 1)[0])
        if block.lang == "python" and name:
            (folder / name.group(1)).write_text(block.text)


def play(page_path: Path, folder: Path, kinds: tuple[str, ...] = ("flowdata check",),
         uses: tuple[Path, ...] = ()) -> list[tuple[Block, Step, str]]:
    """Writes the files of the pages in ``uses``, then the page's own, into ``folder`` and
    runs its transcripts whose commands start with one of ``kinds``; returns ``(block,
    step, what it printed)`` for every step run, the folder named as the page names it."""
    for other in uses:
        write_files(other, folder)
    page = page_path.read_text()
    results = []
    for block in blocks(page):
        first = block.text.split("\n", 1)[0]
        name = re.fullmatch(r"# ([\w/]+\.py)", first)
        if block.lang == "python" and name:
            path = folder / name.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text)
            continue
        if block.lang or not block.text.startswith("$ "):
            continue
        todo = steps(block.text)
        if not all(s.command.startswith(kinds) or s.command == "echo $?" for s in todo):
            continue
        status = 0
        for step in todo:
            got, status = run(step.command, folder, status)
            results.append((block, step, normalise(got, folder, shown_folder(page_path))))
    return results


PAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # page: (the commands whose transcripts are played, the pages whose files it uses)
    "docs/errors.md": (("flowdata check",), ()),
    "docs/cli.md": (("flowdata ", "python -m flowdata "), ("docs/index.md", "docs/errors.md")),
    "docs/index.md": (("flowdata ", "python "), ()),
    "docs/reliability.md": (("python ",), ()),
    "docs/hamilton.md": (("python ",), ()),
}


def play_page(page: str, folder: Path) -> list[tuple[Block, Step, str]]:
    """:func:`play` for one of :data:`PAGES`."""
    kinds, uses = PAGES[page]
    return play(ROOT / page, folder, kinds, tuple(ROOT / u for u in uses))


def update(page: str) -> int:
    """Rewrites the page's played transcripts with what the commands print; returns how many changed."""
    page_path = ROOT / page
    folder = Path(f"/tmp/flowdata-docs-{os.getpid()}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        results = play_page(page, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    page = page_path.read_text()
    by_block: dict[int, list[tuple[Step, str]]] = {}
    for block, step, got in results:
        by_block.setdefault(block.start, []).append((step, got))
    changed = 0
    for block in sorted(blocks(page), key=lambda b: -b.start):  # from the end: offsets stay valid
        if block.start not in by_block:
            continue
        text = "".join(f"$ {s.command}\n" + (f"{got}\n" if got else "") for s, got in by_block[block.start])
        if text != block.text:
            changed += 1
            page = page[: block.start] + text + page[block.end :]
    page_path.write_text(page)
    return changed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", nargs="+", metavar="PAGE", required=True)
    for page_name in parser.parse_args().update:
        print(f"{page_name}: {update(page_name)} transcript(s) rewritten")
