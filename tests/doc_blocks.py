"""The code blocks of a documentation page, run as the page shows them.

A page's fenced blocks are read in order and run in the page's own folder:

- a ```` ```python ```` block whose first line is ``# name.py`` is a **file**: it is
  written there exactly as shown (that first line included, so the line numbers a command
  prints are those of the block). If a plain ```` ``` ```` block follows it (blank lines
  between), that block is what ``python name.py`` prints;
- any other ```` ```python ```` block is a **snippet**: the page's snippets run in one
  interpreter, in order, in one namespace (like a notebook; the folder's files are
  importable). A plain block right after it is what it prints; with none, it must print
  nothing and not raise. A block that lists signatures (``Driver.execute(outputs, ...)``)
  is compared with the real ones instead (every parameter, with its kind and default,
  unless the list has a bare ``...``);
- a plain block starting with ``>>> `` is an **interactive session** in the page's
  interpreter: each statement runs as the ``>>>`` prompt runs it (an expression's value is
  echoed) and the lines after it are what it prints;
- a plain block starting with ``$ `` is a **transcript**: each ``$ command`` runs in a shell
  in the folder (``flowdata`` and ``python`` are the project's), and the lines up to the
  next ``$ `` are what it prints (stdout and stderr as a terminal interleaves them);
  ``$ echo $?`` prints the status of the command before it;
- ``<!-- doc: not run (why) -->`` right above a block leaves it unrun (a snippet is only
  compiled; a file is written but not run).

What is printed is compared after :func:`normalise` (memory addresses, pids, temporary
folders, timings); ``...`` in the page stands for any text within a line, and a line that
is only ``...`` for any lines. Paths show the page's folder as ``/tmp/fdd/<page>`` and the
project's checkout as ``...``. Run as a script, it rewrites the outputs of a page that
differ from what the blocks print, so quoted output is produced, never typed::

    .venv/bin/python -m tests.doc_blocks --update docs/errors.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def located(text: str, folder: Path, shown: str) -> str:
    """Output with the folder the blocks ran in named as the page names it (``shown``), and
    the project's checkout as ``...``: what the page prints for paths."""
    return text.replace(str(folder), shown).replace(str(ROOT), "...")


def normalise(text: str) -> str:
    """Output with what changes from run to run replaced (memory addresses, pids, temporary
    folders, timings) and trailing blanks removed: what is compared."""
    for pattern, fixed in _VARIES:
        text = re.sub(pattern, fixed, text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


_VARIES = [  # what changes from run to run, and what it is compared as
    (r"0x[0-9a-f]{6,}", "0x..."),  # memory addresses
    (r"\bpid(\(s\))? \d+", r"pid\1 N"),  # process ids
    (r"(/tmp/[A-Za-z_]+-)[a-z0-9_]{8}\b", r"\1XXXXXXXX"),  # tempfile.mkdtemp(prefix=...) folders
    (r"/tmp/tmp[a-z0-9_]{8}\b", "/tmp/tmpXXXXXXXX"),  # tempfile.mkdtemp() folders
    (r"-[a-z0-9_]{8}\.arrow\b", "-XXXXXXXX.arrow"),  # index files
    (r"\bpass-[0-9a-f]{32}\b", "pass-KEY"),  # pass-cache entries (the key covers file times)
    (r"\(key [0-9a-f]{12}\)", "(key KEY)"),
    (r"\b\d+\.\d{3}s\b", "#.###s"),  # node timings of a report
    (r"slowest: [^\n)]*", "slowest: ..."),  # which nodes were slowest (near-equal ones swap)
]


def shown_folder(page_path: Path) -> str:
    """The folder a page's outputs name: ``/tmp/fdd/<page>``."""
    return f"/tmp/fdd/{page_path.stem}"


def run(command: str, folder: Path, last_status: int) -> tuple[str, int]:
    """What ``command`` prints in ``folder`` (stdout and stderr interleaved, as a terminal
    shows them), and its status."""
    if command.strip() == "echo $?":
        return str(last_status), 0
    done = subprocess.run(["bash", "-c", command], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=_shell_env(), timeout=600)
    return done.stdout.rstrip("\n"), done.returncode


def _shell_env() -> dict[str, str]:
    """The environment of a user's shell with the project's virtual environment active,
    importing flowdata from this checkout (so a page tests the code beside it, also from a
    second work tree that shares the virtual environment)."""
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    env.update(PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1", COLUMNS="100")
    return env


def file_name(block: Block) -> str | None:
    """``name.py`` of a file block (a python block whose first line is ``# name.py``)."""
    name = re.fullmatch(r"# ([\w/]+\.py)", block.text.split("\n", 1)[0])
    return name.group(1) if block.lang == "python" and name else None


def write_file(block: Block, folder: Path) -> str | None:
    """Writes a file block into ``folder``, exactly as shown; returns its name (None: not a file)."""
    name = file_name(block)
    if name is not None:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(block.text)
    return name


def write_files(page_path: Path, folder: Path) -> None:
    """Writes a page's file blocks into ``folder`` (for a page that uses them)."""
    for block in blocks(page_path.read_text()):
        write_file(block, folder)


class Session:
    """The interpreter a page's snippets run in, one namespace for the page (``tests/doc_session.py``)."""

    def __init__(self, folder: Path):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("doc_session.py")), str(folder)],
                                     cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=_shell_env())

    def _ask(self, request: dict[str, str]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the snippet session ended while running {request.get('name')}")
        return json.loads(answer)  # type: ignore[no-any-return]

    def run(self, code: str, name: str, mode: str = "exec") -> tuple[str, bool]:
        """What ``code`` printed, and whether it raised (``mode="single"``: one interactive
        statement, whose value is echoed)."""
        answer = self._ask({"run": code, "name": name, "mode": mode})
        return answer["printed"].rstrip("\n"), bool(answer["raised"])

    def forget(self, module: str) -> None:
        """Drops an imported module whose file a later block rewrote."""
        self._ask({"forget": module})

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass(frozen=True)
class Played:
    """One check of a page: the block holding what the page says, the command or snippet
    that was run, what the page says it prints, and what it printed (normalised)."""

    block: Block
    command: str
    expected: str
    got: str
    transcript: bool = False  # a step of a transcript (the block holds several)


def examples(text: str) -> list[tuple[str, str]]:
    """The ``(statement, what the page shows it prints)`` pairs of a ``>>>`` block."""
    out: list[tuple[str, str]] = []
    for line in text.rstrip("\n").split("\n"):
        if line.startswith(">>> "):
            out.append((line[4:], ""))
        elif line.startswith("... ") or line == "..." and out and not out[-1][1]:
            out[-1] = (out[-1][0] + "\n" + line[4:], out[-1][1])
        elif out:
            out[-1] = (out[-1][0], (out[-1][1] + "\n" + line) if out[-1][1] else line)
    return [(src + ("\n" if "\n" in src else ""), shown) for src, shown in out]


def _as_example(source: str, shown: str) -> str:
    lines = source.rstrip("\n").split("\n")
    return "\n".join([f">>> {lines[0]}", *(f"... {x}" for x in lines[1:]), *([shown] if shown else [])]) + "\n"


def matches(expected: str, got: str) -> bool:
    """Whether ``got`` is what the page shows: equal after :func:`normalise`, where ``...``
    in a line of the page stands for any text, and a line that is only ``...`` for any lines."""
    expected, got = normalise(expected), normalise(got)
    if expected == got:
        return True
    if "..." not in expected:
        return False
    pattern = ""
    for line in expected.split("\n"):
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += r"[^\n]*".join(re.escape(part) for part in line.split("...")) + "\n"
    return re.fullmatch(pattern, got + "\n") is not None


_MARK = re.compile(r"<!-- doc: ([\w -]+?)(?: \((.*?)\))? -->\s*\n\s*$")
_SIGNATURE = re.compile(r"^(Driver|Builder)\.(\w+)\((.*?)\)(?:\s*(?:->|# ->).*)?$", re.S | re.M)


def mark(page: str, block: Block) -> str:
    """The marker in an HTML comment right above a block (``<!-- doc: not run (why) -->``)."""
    fence = page.rfind("```", 0, block.start)
    m = _MARK.search(page[:fence])
    return m.group(1) if m else ""


def check_signatures(block: Block) -> list[str]:
    """Problems of the ``Driver.x(...)``/``Builder.x(...)`` signatures a block lists: each
    parameter shown exists, of that kind and with that default (``=...``: any default), and
    every parameter is shown unless the list has a bare ``...``."""
    import ast
    import inspect

    import flowdata as fd

    none = object()  # shown without a default
    problems = []
    for m in _SIGNATURE.finditer(block.text):
        where = f"{m.group(1)}.{m.group(2)}"
        real = inspect.signature(getattr(getattr(fd, m.group(1)), m.group(2)))
        params = [p.strip() for p in " ".join(m.group(3).split()).split(",") if p.strip()]
        tree = ast.parse(f"def f({', '.join(p for p in params if p != '...')}): pass").body[0]
        assert isinstance(tree, ast.FunctionDef)
        a = tree.args
        defaults = [none] * (len(a.args) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
        shown: dict[str, tuple[inspect._ParameterKind, object]] = {
            x.arg: (inspect.Parameter.POSITIONAL_OR_KEYWORD, d) for x, d in zip(a.args, defaults)}
        shown |= {x.arg: (inspect.Parameter.KEYWORD_ONLY, none if d is None else ast.literal_eval(d))
                  for x, d in zip(a.kwonlyargs, a.kw_defaults)}
        for name, (kind, default) in shown.items():
            p = real.parameters.get(name)
            if p is None:
                problems.append(f"{where}: the page lists {name!r}, which it does not have")
                continue
            real_default = none if p.default is inspect.Parameter.empty else p.default
            if p.kind != kind or (default is not Ellipsis and (default is none) != (real_default is none)) or (
                    default not in (none, Ellipsis) and real_default != default):
                problems.append(f"{where}: the page shows {name!r} as {kind.description}"
                                f"{'' if default is none else f', default {default!r}'}; it is "
                                f"{p.kind.description}{'' if real_default is none else f', default {real_default!r}'}")
        missing = [p for p in real.parameters if p != "self" and p not in shown]
        if "..." not in params and missing:
            problems.append(f"{where}: the page does not list {', '.join(missing)}")
    return problems


def play(page_path: Path, folder: Path, uses: tuple[Path, ...] = ()) -> list[Played]:
    """Runs a page's blocks in ``folder``, in order (see the module's docstring), after
    writing the files of the pages in ``uses``; returns every check, the folder named as
    the page names it."""
    for other in uses:
        write_files(other, folder)
    page = page_path.read_text()
    shown_as = shown_folder(page_path)
    page_blocks = blocks(page)
    results: list[Played] = []
    session: Session | None = None
    try:
        for i, block in enumerate(page_blocks):
            following = page_blocks[i + 1] if i + 1 < len(page_blocks) else None
            # What a block prints is the plain block right after it (blank lines between).
            output = following if (following is not None and following.lang == ""
                                   and not following.text.startswith(("$ ", ">>> "))
                                   and not page[block.end + 3 : page.rfind("```", 0, following.start)].strip()) else None
            how = mark(page, block)
            name = write_file(block, folder)
            if name is not None:
                if session is not None:
                    session.forget(name[:-3].replace("/", "."))
                if output is not None and how != "not run":
                    got, _ = run(f"python {name}", folder, 0)
                    results.append(Played(output, f"python {name}", output.text.rstrip("\n"),
                                          located(got, folder, shown_as)))
            elif block.lang == "python":
                label = f"<{page_path.name} snippet>"
                if how == "not run" or _SIGNATURE.search(block.text):
                    try:  # a signature list is checked against the real signatures, the rest compiled
                        problems = check_signatures(block) if _SIGNATURE.search(block.text) else []
                        if not problems and how == "not run":
                            compile(block.text, label, "exec")
                    except SyntaxError as exc:
                        problems = [f"not valid Python: {exc}"]
                    results.append(Played(block, f"the API block at {label}", "", "\n".join(problems)))
                    continue
                if session is None:
                    session = Session(folder)
                got, raised = session.run(block.text, label)
                got = located(got, folder, shown_as)
                if output is not None:
                    results.append(Played(output, f"the snippet at {label}", output.text.rstrip("\n"), got))
                elif got or raised:
                    results.append(Played(block, f"the snippet at {label} (the page shows no output)", "", got))
            elif block.lang == "" and block.text.startswith(">>> "):
                if session is None:
                    session = Session(folder)
                for n, (source, expected) in enumerate(examples(block.text)):
                    got, _ = session.run(source, "<stdin>", "single")
                    results.append(Played(block, source, expected, located(got, folder, shown_as),
                                          transcript=True))
            elif block.lang == "" and block.text.startswith("$ "):
                status = 0
                for step in steps(block.text):
                    got, status = run(step.command, folder, status)
                    results.append(Played(block, f"$ {step.command}", step.expected,
                                          located(got, folder, shown_as), transcript=True))
    finally:
        if session is not None:
            session.close()
    return results


def pages() -> list[str]:
    """Every page whose blocks are played: README.md and docs/*.md."""
    return ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]


USES: dict[str, tuple[str, ...]] = {
    # page: the pages whose files its blocks use
    "docs/cli.md": ("docs/index.md", "docs/errors.md"),
}


def play_page(page: str, folder: Path) -> list[Played]:
    """:func:`play` for one page of :func:`pages`."""
    return play(ROOT / page, folder, tuple(ROOT / u for u in USES.get(page, ())))


def update(page: str) -> int:
    """Rewrites the outputs the page shows that differ from what its blocks print (an
    output that matches, ``...`` included, is left as written); returns how many blocks changed."""
    page_path = ROOT / page
    folder = Path(f"/tmp/flowdata-docs-{os.getpid()}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        results = play_page(page, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    text = page_path.read_text()
    by_block: dict[int, list[Played]] = {}
    for r in results:
        by_block.setdefault(r.block.start, []).append(r)
    changed = 0
    for block in sorted(blocks(text), key=lambda b: -b.start):  # from the end: offsets stay valid
        played = by_block.get(block.start)
        if not played or all(matches(r.expected, r.got) for r in played):
            continue
        if block.text.startswith(">>> "):
            new = "".join(_as_example(r.command, r.expected if matches(r.expected, r.got) else r.got)
                          for r in played)
        elif played[0].transcript:
            new = "".join(f"{r.command}\n" + (f"{r.got if not matches(r.expected, r.got) else r.expected}\n"
                                             if (r.got or r.expected) else "") for r in played)
        elif block.lang == "":
            new = played[-1].got + "\n"
        else:
            for r in played:
                print(f"{page}:{block.line}: {r.command}: fix by hand:\n{r.got}", file=sys.stderr)
            continue
        changed += 1
        text = text[: block.start] + new + text[block.end :]
    page_path.write_text(text)
    return changed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", nargs="+", metavar="PAGE", required=True)
    for page_name in parser.parse_args().update:
        print(f"{page_name}: {update(page_name)} output block(s) rewritten")
