"""The executor an ``executor=`` argument names: ``"inline"``, ``"processes"``, ``"ray"``, or an
object that follows the contract (:mod:`.contract`), checked before anything runs."""

from __future__ import annotations

import inspect

from flowdata.errors import InputError
from flowdata.run.executors.contract import Executor, InlineExecutor
from flowdata.run.executors.processes import ProcessExecutor

__all__ = ["resolve_executor"]


def resolve_executor(executor: object) -> tuple[Executor, bool]:
    """The executor for an ``executor=`` argument, and whether flowdata owns (closes) it."""
    if executor is None or executor == "inline":
        return InlineExecutor(), True
    if executor == "processes":
        return ProcessExecutor(), True
    if executor == "ray":  # joins a running Ray, else starts a local one for this call
        from flowdata.run.executors.ray import RayExecutor

        return RayExecutor(), True
    # A wrong executor= is a wrong argument, refused like any other (InputError).
    if isinstance(executor, str):
        raise InputError(
            f"unknown executor {executor!r}\n"
            "  fix: use 'inline', 'processes', 'ray', or an object with a map(fn, tasks, *, context) "
            "method such as flowdata.ProcessExecutor(num_workers=2)"
        )
    if not isinstance(executor, Executor) or not _takes_context(executor):
        raise InputError(
            f"executor {executor!r} has no map(fn, tasks, *, context) method\n"
            "  fix: pass 'inline', 'processes', 'ray', or an object implementing flowdata.Executor "
            "(map calls fn(context, task) for every task and yields the results in order)"
        )
    return executor, False


def _takes_context(executor: object) -> bool:
    try:
        params = inspect.signature(executor.map).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return True  # cannot tell: let it run
    return "context" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
