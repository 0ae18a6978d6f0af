"""A build as fast as a linter: fresh-process times of building and checking a module.

Each row is a fresh interpreter (what a user, an editor hook or CI pays), run in
interleaved rounds, and the row's figure is its fastest round (the machine's noise only
ever adds). Rows:

- ``python``: the bare interpreter (``python -c pass``), the floor of every row;
- ``import flowdata``;
- ``build``: ``import flowdata`` plus ``Builder().with_modules(core_flow).build()``;
- ``check``: the ``flowdata check core_flow.py`` command;
- ``check, Hamilton's resolvers``: the same with ``FLOWDATA_HAMILTON=1``, which builds
  through Hamilton's function-modifier resolvers (what every build did before);
- ``Hamilton build``: Hamilton 1.90's ``driver.Builder().with_modules(...).build()`` of the
  same graph written with Hamilton's markers (``core_flow_hamilton.py``).

Bytecode is written and reused (as after any first run), whatever the calling shell's
``PYTHONDONTWRITEBYTECODE``.

    python tests/benchmarks/bench_build.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FLOWDATA = [sys.executable, "-m", "flowdata"]

BUILD = "import flowdata as fd, core_flow; fd.Builder().with_modules(core_flow).build()"
HAMILTON = ("from hamilton import driver; import core_flow_hamilton as m; "
            "driver.Builder().enable_dynamic_execution(allow_experimental_mode=True).with_modules(m).build()")

ROWS: list[tuple[str, list[str], dict[str, str]]] = [
    ("python", [sys.executable, "-c", "pass"], {}),
    ("import flowdata", [sys.executable, "-c", "import flowdata"], {}),
    ("build", [sys.executable, "-c", BUILD], {}),
    ("check", [*FLOWDATA, "check", str(HERE / "core_flow.py")], {}),
    ("check, Hamilton's resolvers", [*FLOWDATA, "check", str(HERE / "core_flow.py")], {"FLOWDATA_HAMILTON": "1"}),
    ("Hamilton build", [sys.executable, "-c", HAMILTON], {}),
]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]), **extra}


def _once(cmd: list[str], extra: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=_env(extra), cwd=HERE, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    for _, cmd, extra in ROWS:  # writes the bytecode, and shows a row that fails
        subprocess.run(cmd, env=_env(extra), cwd=HERE, check=True, capture_output=True)
    best = {name: float("inf") for name, _, _ in ROWS}
    for _ in range(args.rounds):
        for name, cmd, extra in ROWS:
            best[name] = min(best[name], _once(cmd, extra))
    floor = best["python"]
    print(f"fresh-process wall time, fastest of {args.rounds} interleaved rounds ({sys.platform}, "
          f"{os.cpu_count()} cores)")
    print(f"{'row':32} {'ms':>8} {'over python':>12} {'vs check':>9}")
    for name, _, _ in ROWS:
        t = best[name]
        print(f"{name:32} {t * 1e3:8.1f} {(t - floor) * 1e3:10.1f}ms {t / best['check']:8.2f}x")


if __name__ == "__main__":
    main()
