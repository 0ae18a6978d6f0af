"""The ``flowdata`` command (also ``python -m flowdata``).

::

    flowdata check MODULE... [--config k=v ...] [--format text|json]
    flowdata run MODULE... --outputs a,b [--input k=v ...] [--config k=v ...]
                 [--executor inline|processes|ray[:ADDRESS]] [--format text|json]
    flowdata plan MODULE... --outputs a,b [--input k=v ...] [--config k=v ...]
    flowdata sample MODULE... --outputs a,b [--index N] [--input k=v ...] [--config k=v ...]
                 [--format text|json]
    flowdata viz MODULE... [-o dag.svg] [--outputs a,b] [--config k=v ...]
                 [--orient LR|TB] [--no-types] [--mermaid]
    flowdata --version

MODULE is a dotted module name, a path to a ``.py`` file, a folder (its ``.py`` files,
recursively, leaving out ``_*`` and ``test_*`` files) or a glob pattern. Values given as
``k=v`` are read by the annotation of the parameters that read them: an ``int`` parameter
takes ``n=10`` and refuses ``n=true`` or ``n=1.5``, a ``str`` parameter keeps ``name=10`` as
the text ``"10"``, and other types are read as JSON when they parse (``xs=[1,2]`` a list),
else as text. ``check`` exits 0 on a clean graph and 1 listing every problem, like a
linter. Every failure is one line on stderr and a non-zero exit (1: the graph or the call
failed; 2: a module could not be loaded or an argument is wrong); a closed pipe (``| head``)
ends the command quietly. ``FLOWDATA_TRACEBACK=1`` adds the Python traceback. The fixes of
the messages it prints are what to type here (``flowdata sample ... --index 3``,
``--input n=...``), not the library's Python calls. A ``.py`` file is imported as ``python
file.py`` runs it, its folder first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import glob
import json
import math
import os
import re
import shlex
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from flowdata.compiler import compile_modules, inputs_like_nodes, load_module
from flowdata.driver import Builder
from flowdata.errors import FlowdataError, GraphError

__all__ = ["main"]


_PYTHON_WORDS: dict[str, Any] = {"True": True, "False": False, "None": None}


def _pairs(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise _UsageError(f"--{what} expects key=value, got {item!r}")
        if raw in _PYTHON_WORDS:  # True/False/None as Python writes them, not only JSON's
            out[key] = _PYTHON_WORDS[raw]
            continue
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _inputs(raw: Sequence[str] | None, graph: Any) -> dict[str, Any]:
    """The ``--input`` values, read by the annotations of the parameters that read them."""
    values = _pairs(raw, "input")
    texts = {k: v for k, _, v in (item.partition("=") for item in raw or ())}
    out = dict(values)
    for key, value in values.items():
        spec = graph.inputs.get(key)
        if spec is None:
            continue
        types = {p.type for _, p in spec.readers}
        if types == {str}:
            out[key] = texts[key]  # a str parameter keeps the text as typed
        elif types == {int} and (isinstance(value, bool) or not isinstance(value, int)):
            raise _UsageError(f"--input {key}={texts[key]}: '{key}' is an int parameter, so it needs a whole number")
        elif types == {float} and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise _UsageError(f"--input {key}={texts[key]}: '{key}' is a float parameter, so it needs a number")
        elif types == {float}:
            out[key] = float(value)
        elif types == {bool} and not isinstance(value, bool):
            raise _UsageError(f"--input {key}={texts[key]}: '{key}' is a bool parameter: give true or false")
    return out


def _jsonable(value: Any) -> Any:
    """A value as valid JSON: NaN and inf as null, tensors and arrays as lists, ``Stats``,
    ``Vocab`` and other dataclasses as objects, anything else as its repr."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and callable(value.tolist):  # tensors, arrays, numpy scalars
        return _jsonable(value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # The fields that make the value (a derived lookup such as Vocab.index is left out).
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    return repr(value)


def _print_values(values: Mapping[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(_jsonable(values), indent=2, allow_nan=False))
        return
    width = max((len(k) for k in values), default=0)
    for key, value in values.items():
        print(f"{key:<{width}}  {value!r}")


def _outputs(text: str) -> list[str]:
    outputs = [o.strip() for o in text.split(",") if o.strip()]
    if not outputs:
        raise _UsageError("--outputs needs at least one node name, e.g. --outputs total,mean")
    return outputs


def _parser() -> argparse.ArgumentParser:
    from flowdata.run import package_version

    __version__ = package_version("flowdata")
    parser = argparse.ArgumentParser(prog="flowdata", description="Typed dataflows for ML data pipelines.")
    parser.add_argument("--version", action="version", version=f"flowdata {__version__}")
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
    run.add_argument("--executor", type=_executor_name, default="inline", metavar="inline|processes|ray[:ADDRESS]",
                     help="where Parallel chunks run (default inline); ray:ADDRESS joins a running Ray cluster")
    run.add_argument("--format", choices=("text", "json"), default="text")

    plan = sub.add_parser("plan", help="print the plan of a call: passes, groups, what each computes")
    plan.add_argument("modules", nargs="+", metavar="MODULE")
    plan.add_argument("--outputs", required=True, help="comma-separated node names")
    plan.add_argument("--input", action="append", metavar="K=V", help="input value (repeatable)")
    plan.add_argument("--config", action="append", metavar="K=V", help="config entry (repeatable)")

    sample = sub.add_parser("sample", help="run one sample through its group and print its values")
    sample.add_argument("modules", nargs="+", metavar="MODULE")
    sample.add_argument("--outputs", required=True, help="comma-separated per-sample node names of one group")
    sample.add_argument("--index", type=int, default=0, help="the sample index (default 0)")
    sample.add_argument("--input", action="append", metavar="K=V", help="input value (repeatable)")
    sample.add_argument("--config", action="append", metavar="K=V", help="config entry (repeatable)")
    sample.add_argument("--format", choices=("text", "json"), default="text")

    viz = sub.add_parser("viz", help="draw the graph (DOT, SVG, PNG, PDF or Mermaid)")
    viz.add_argument("modules", nargs="+", metavar="MODULE")
    viz.add_argument("-o", "--output", help="file to render (format from its suffix); prints DOT when left out")
    viz.add_argument("--outputs", help="comma-separated node names: draw only what they need")
    viz.add_argument("--config", action="append", metavar="K=V", help="config entry (repeatable)")
    viz.add_argument("--orient", choices=("LR", "TB"), default="LR")
    viz.add_argument("--no-types", action="store_true", help="leave types off the edges")
    viz.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart instead of DOT")
    return parser


def _expand(names: Sequence[str]) -> list[str]:
    """Module names and files, with folders and glob patterns expanded to their files."""
    out: list[str] = []
    for name in names:
        if os.path.isdir(name):
            found = []
            for root, dirs, files in os.walk(name):
                dirs[:] = [d for d in dirs if not d.startswith(".")]  # .git, .venv: not walked at all
                found += [os.path.join(root, f) for f in files if f.endswith(".py") and not f.startswith(("_", "test_"))]
            found.sort()
            if not found:
                raise _ModuleLoadError(f"folder {name!r} holds no module (.py file)")
            out.extend(found)
        elif any(c in name for c in "*?["):
            found = sorted(glob.glob(name, recursive=True))
            if not found:
                raise _ModuleLoadError(f"no file matches {name!r}")
            out.extend(found)
        else:
            out.append(name)
    return out


def _load(names: Sequence[str]) -> list[ModuleType]:
    modules = []
    for name in _expand(names):
        try:
            modules.append(load_module(name))
        except Exception as exc:  # whatever the module raises while importing
            raise _ModuleLoadError(f"cannot import module {name!r}: {type(exc).__name__}: {exc}") from exc
    return modules


class _ModuleLoadError(Exception):
    pass


class _UsageError(Exception):
    pass


def _check(args: argparse.Namespace) -> int:
    modules = _load(args.modules)
    config = _pairs(args.config, "config")
    compiled = compile_modules(modules, config)
    problems = compiled.problems
    warned = inputs_like_nodes(compiled.graph, config)
    problems = tuple(dataclasses.replace(p, fix=_for_the_shell(p.fix, args)) for p in problems)
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


def _driver(args: argparse.Namespace) -> Any:
    return Builder().with_modules(*_load(args.modules)).with_config(_pairs(args.config, "config")).build()


def _executor_name(text: str) -> str:
    """``--executor`` checked as argparse reads it (the executor is made only when it runs)."""
    if text in ("inline", "processes", "ray") or (text.startswith("ray:") and len(text) > 4):
        return text
    raise argparse.ArgumentTypeError(
        f"expected inline, processes, ray or ray:ADDRESS (such as ray:auto or ray:127.0.0.1:6379), got {text!r}"
    )


def _executor(name: str) -> Any:
    """The executor ``--executor`` names: a name ``execute()`` reads, or a RayExecutor that
    joins the cluster at ADDRESS (closed by :func:`_run`)."""
    if not name.startswith("ray:"):
        return name
    from flowdata.run import RayExecutor

    return RayExecutor(address=name[4:])


def _run(args: argparse.Namespace) -> int:
    outputs = _outputs(args.outputs)
    driver = _driver(args)
    inputs = _inputs(args.input, driver.graph)
    executor = _executor(args.executor)
    try:
        values = driver.execute(outputs, inputs=inputs, executor=executor)
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
    _print_values(values, args.format)
    return 0


def _plan(args: argparse.Namespace) -> int:
    outputs = _outputs(args.outputs)
    driver = _driver(args)
    print(driver.plan(outputs, _inputs(args.input, driver.graph)))
    return 0


def _sample(args: argparse.Namespace) -> int:
    outputs = _outputs(args.outputs)
    driver = _driver(args)
    inputs = _inputs(args.input, driver.graph)
    _print_values(driver.run_sample(outputs, index=args.index, inputs=inputs), args.format)
    return 0


_PICTURES = ("svg", "png", "pdf", "dot", "gv", "jpg", "jpeg", "gif", "ps", "eps", "json")


def _viz(args: argparse.Namespace) -> int:
    if args.output:
        suffix = os.path.splitext(args.output)[1].lstrip(".").lower()
        if suffix not in _PICTURES:
            raise _UsageError(
                f"-o {args.output}: unknown picture format {suffix or '(no suffix)'!r}; "
                f"use one of {', '.join('.' + s for s in _PICTURES[:5])}, or --mermaid"
            )
    driver = _driver(args)
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


def _flags(args: argparse.Namespace) -> str:
    """The ``--input``/``--config`` flags of this command, to repeat in a command it suggests."""
    given = [("--input", v) for v in getattr(args, "input", None) or ()]
    given += [("--config", v) for v in getattr(args, "config", None) or ()]
    return "".join(f" {flag} {shlex.quote(v)}" for flag, v in given)


def _sample_command(args: argparse.Namespace, match: re.Match[str]) -> str:
    try:
        names = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return match.group(0)
    modules = " ".join(shlex.quote(m) for m in args.modules)
    return f"flowdata sample {modules} --outputs {','.join(names)} --index {match.group(2)}{_flags(args)}"


def _input_flags(match: re.Match[str]) -> str:
    return " ".join(f"--input {k}=..." for k in re.findall(r"'([^']+)': \.\.\.", match.group(1)))


def _for_the_shell(text: str, args: argparse.Namespace) -> str:
    """A message of the library with its Python fixes as what to type at the command line:
    ``driver.run_sample(['x'], index=3)`` becomes the ``flowdata sample ... --index 3``
    command (with this command's modules, inputs and config), ``inputs={'n': ...}`` the
    ``--input n=...`` flag, ``.with_config({'k': ...})`` the ``--config k=...`` flag."""
    text = re.sub(r"driver\.run_sample\((\[[^\]]*\]), index=(\d+)(?:, inputs=<the same inputs>)?\)",
                  lambda m: _sample_command(args, m), text)
    text = re.sub(r"pass inputs=\{((?:'[^']+': \.\.\.(?:, )?)+)\}", lambda m: "add " + _input_flags(m), text)
    text = re.sub(r"pass it in inputs=\{((?:'[^']+': \.\.\.(?:, )?)+)\}", lambda m: "pass it with " + _input_flags(m),
                  text)
    text = re.sub(r"set it with \.with_config\(\{'([^']+)': \.\.\.\}\)", r"set it with --config \1=...", text)
    text = text.replace("and execute() returns whole values", "and flowdata run prints whole values")
    return text.replace("give it to Builder().with_config(), not inputs=", "give it with --config, not --input")


def _warning_printer(args: argparse.Namespace) -> Callable[..., None]:
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        """A warning as one message, ``flowdata: <Category>: <message>`` (the line it was
        raised at is flowdata's own, not yours)."""
        print(f"flowdata: {category.__name__}: {_for_the_shell(str(message), args)}", file=sys.stderr)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    commands = {"check": _check, "run": _run, "plan": _plan, "sample": _sample, "viz": _viz}
    try:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _warning_printer(args)
                return commands[args.command](args)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, inside the handlers below
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, as other command-line tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except (_ModuleLoadError, _UsageError) as exc:
        print(f"flowdata: {_for_the_shell(str(exc), args)}", file=sys.stderr)
        return 2
    except Exception as exc:  # FlowdataError and anything a user's module raises: one message
        name = type(exc).__name__ if isinstance(exc, FlowdataError) else f"{type(exc).__name__} (not flowdata's)"
        print(f"flowdata: {name}: {_for_the_shell(str(exc), args)}", file=sys.stderr)
        if os.environ.get("FLOWDATA_TRACEBACK"):
            traceback.print_exception(exc)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
