"""The ``flowdata`` command (also ``python -m flowdata``).

::

    flowdata check MODULE... [--config k=v ...] [--format text|json]
    flowdata run MODULE... --outputs a,b [--input k=v ...] [--config k=v ...]
                 [--executor inline|processes] [--format text|json]
    flowdata viz MODULE... [-o dag.svg] [--outputs a,b] [--config k=v ...]
                 [--orient LR|TB] [--no-types] [--mermaid]

MODULE is a dotted module name or a path to a ``.py`` file. Values given as ``k=v`` are
read as JSON when they parse (``n=10`` is an int, ``xs=[1,2]`` a list) and as strings
otherwise. ``check`` exits 0 on a clean graph and 1 listing every problem, like a linter.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from flowdata.driver import Builder, compile_modules, inputs_like_nodes, load_module
from flowdata.errors import FlowdataError, GraphError

__all__ = ["main"]


_PYTHON_WORDS: dict[str, Any] = {"True": True, "False": False, "None": None}


def _pairs(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"flowdata: --{what} expects key=value, got {item!r}")
        if raw in _PYTHON_WORDS:  # True/False/None as Python writes them, not only JSON's
            out[key] = _PYTHON_WORDS[raw]
            continue
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flowdata", description="Typed dataflows for ML data pipelines.")
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="type-check modules and list every problem")
    check.add_argument("modules", nargs="+", metavar="MODULE")
    check.add_argument("--config", action="append", metavar="K=V", help="config entry (repeatable)")
    check.add_argument("--format", choices=("text", "json"), default="text")

    run = sub.add_parser("run", help="compute outputs and print them")
    run.add_argument("modules", nargs="+", metavar="MODULE")
    run.add_argument("--outputs", required=True, help="comma-separated node names")
    run.add_argument("--input", action="append", metavar="K=V", help="input value (repeatable)")
    run.add_argument("--config", action="append", metavar="K=V", help="config entry (repeatable)")
    run.add_argument("--executor", choices=("inline", "processes"), default="inline")
    run.add_argument("--format", choices=("text", "json"), default="text")

    viz = sub.add_parser("viz", help="draw the graph (DOT, SVG, PNG, PDF or Mermaid)")
    viz.add_argument("modules", nargs="+", metavar="MODULE")
    viz.add_argument("-o", "--output", help="file to render (format from its suffix); prints DOT when left out")
    viz.add_argument("--outputs", help="comma-separated node names: draw only what they need")
    viz.add_argument("--config", action="append", metavar="K=V", help="config entry (repeatable)")
    viz.add_argument("--orient", choices=("LR", "TB"), default="LR")
    viz.add_argument("--no-types", action="store_true", help="leave types off the edges")
    viz.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart instead of DOT")
    return parser


def _load(names: Sequence[str]) -> list[ModuleType]:
    modules = []
    for name in names:
        try:
            modules.append(load_module(name))
        except Exception as exc:  # whatever the module raises while importing
            raise _ModuleLoadError(f"cannot import module {name!r}: {type(exc).__name__}: {exc}") from exc
    return modules


class _ModuleLoadError(Exception):
    pass


def _check(args: argparse.Namespace) -> int:
    modules = _load(args.modules)
    compiled = compile_modules(modules, _pairs(args.config, "config"))
    problems = compiled.problems
    warned = inputs_like_nodes(compiled.graph, _pairs(args.config, "config"))
    if args.format == "json":
        print(json.dumps({"ok": not problems, "problems": [p.to_dict() for p in problems], "warnings": warned},
                         indent=2))
    elif problems:
        print(GraphError(problems))
        if warned:
            print(f"\n{len(warned)} warning(s), perhaps the cause:")
            for w in warned:
                print(w)
    else:
        n = len(compiled.graph.nodes)
        print(f"ok: {n} node{'s' if n != 1 else ''}, no problems" + (f", {len(warned)} warning(s):" if warned else ""))
        for w in warned:
            print(w)
    return 1 if problems else 0


def _run(args: argparse.Namespace) -> int:
    outputs = [o.strip() for o in args.outputs.split(",") if o.strip()]
    if not outputs:
        raise SystemExit("flowdata: --outputs needs at least one node name, e.g. --outputs total,mean")
    driver = Builder().with_modules(*_load(args.modules)).with_config(_pairs(args.config, "config")).build()
    result = driver.execute(outputs, inputs=_pairs(args.input, "input"), executor=args.executor)
    if args.format == "json":
        print(json.dumps(result, indent=2, default=repr))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value!r}")
    return 0


def _viz(args: argparse.Namespace) -> int:
    driver = Builder().with_modules(*_load(args.modules)).with_config(_pairs(args.config, "config")).build()
    outputs = [o.strip() for o in args.outputs.split(",") if o.strip()] if args.outputs else None
    if args.mermaid:
        print(driver.to_mermaid(outputs, orient=args.orient), end="")
        return 0
    dot = driver.visualize(args.output, outputs, show_types=not args.no_types, orient=args.orient)
    if args.output:
        print(f"wrote {args.output}")
    else:
        print(dot.source, end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return {"check": _check, "run": _run, "viz": _viz}[args.command](args)
    except FlowdataError as exc:
        print(f"flowdata: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except _ModuleLoadError as exc:
        print(f"flowdata: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
