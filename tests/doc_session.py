"""The interpreter a documentation page's snippets run in (see ``tests/doc_blocks.py``).

Run as ``python doc_session.py FOLDER`` with the page's folder as the working directory.
It reads one JSON request per line on stdin -- ``{"run": code, "name": name}`` or
``{"forget": module}``; ``"mode": "single"`` runs one interactive statement, echoing
its value as ``>>>`` does -- and answers each with one JSON line on its stdout: what the code
printed (stdout and stderr of the process, its workers included, as one stream) and
whether it raised. The code runs in one namespace for the whole page, in order, like a
notebook; an exception prints its traceback as the interpreter would (an interactive
statement's as doctest writes it, its frames elided as ``...``) and the page goes on.
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import tempfile
import traceback


def main() -> None:
    folder = sys.argv[1]
    sys.path[0] = folder  # as `python script.py` in the folder: its modules are importable
    protocol = os.fdopen(os.dup(1), "w")
    namespace: dict[str, object] = {"__name__": "__main__"}
    for line in sys.stdin:
        request = json.loads(line)
        if "forget" in request:
            sys.modules.pop(request["forget"], None)
            protocol.write("{}\n")
            protocol.flush()
            continue
        code, name = request["run"], request["name"]
        mode = request.get("mode", "exec")  # "single": an interactive statement, its value echoed
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        raised = False
        with tempfile.TemporaryFile() as out:
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            try:
                exec(compile(code, name, mode), namespace)
            except BaseException as exc:  # noqa: BLE001 - shown as the interpreter shows it
                raised = True
                if mode == "single":  # as doctest writes it: the frames elided
                    print("Traceback (most recent call last):\n  ...", file=sys.stderr)
                    print("".join(traceback.format_exception_only(type(exc), exc)), end="", file=sys.stderr)
                else:
                    traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
            out.seek(0)
            printed = out.read().decode("utf-8", "replace")
        protocol.write(json.dumps({"printed": printed, "raised": raised}) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
