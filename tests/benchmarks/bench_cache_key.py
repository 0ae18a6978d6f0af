"""What the pass cache's key costs: a statistics pass with and without ``cache_dir``,
for this tree and for another revision, side by side in one run.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_cache_key.py                  # this tree only
    .venv/bin/python tests/benchmarks/bench_cache_key.py --against REV    # and REV, interleaved

The workload is ``stats_flow.py`` (bench_stats's section 2): ``--pngs`` (500) 64x64 RGB
PNGs written once, a Parallel source of their sorted paths, a ``pixels`` node decoding
each with PIL, and a per-channel ``@reduce(Welford, dim=(0, 2, 3))``. Rows, each the best
of ``--repeats`` (5) runs after a warm-up, run inline in a fresh interpreter per tree:

- *no cache*: ``execute(["pixel_stats"])`` -- the pass alone;
- *cold cache*: the same with a new, empty ``cache_dir`` per run: the key (items, every
  file an item names, the code and all it reaches, inputs, versions), the pass and the
  store;
- *warm cache*: the same ``cache_dir`` again: the key and the load, no pass.

With ``--against``, ``REV`` is checked out into a temporary worktree and each row runs
alternately under both trees (``--rounds`` (2) rounds), so a slow moment of the machine
hits both; the table gives each tree's best time per sample and the ratio this tree / REV.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

CHILD = r"""
import json, sys, tempfile, time
sys.path.insert(0, {bench!r})
import flowdata as fd
import stats_flow

folder, repeats = {folder!r}, {repeats}
dr = fd.Builder().with_modules(stats_flow).build()
assert fd.__file__.startswith({tree!r}), fd.__file__

def best(work):
    work()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        work()
        times.append(time.perf_counter() - t)
    return min(times)

inputs = {{"folder": folder}}
out = {{"no cache": best(lambda: dr.execute(["pixel_stats"], inputs=inputs))}}
out["cold cache"] = best(lambda: dr.execute(["pixel_stats"], inputs=inputs, cache_dir=tempfile.mkdtemp()))
warm = tempfile.mkdtemp()
dr.execute(["pixel_stats"], inputs=inputs, cache_dir=warm)
out["warm cache"] = best(lambda: dr.execute(["pixel_stats"], inputs=inputs, cache_dir=warm))
print(json.dumps(out))
"""


def run_tree(tree: Path, folder: str, repeats: int) -> dict[str, float]:
    """The rows under the flowdata of ``tree``, in a fresh interpreter."""
    code = CHILD.format(bench=str(HERE), folder=folder, repeats=repeats, tree=str(tree))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          cwd=tempfile.gettempdir())
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="a git revision to compare with, side by side")
    parser.add_argument("--pngs", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import bench_common as bc

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "pngs"
        folder.mkdir()
        bc.write_pngs(folder, args.pngs, seed=(0, 7))
        trees = {"this tree": ROOT}
        if args.against:
            other = Path(scratch) / "against"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(other), args.against],
                           check=True, capture_output=True)
            trees[args.against] = other
        try:
            best: dict[str, dict[str, float]] = {name: {} for name in trees}
            t0 = time.perf_counter()
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    for row, seconds in run_tree(tree, str(folder), args.repeats).items():
                        best[name][row] = min(seconds, best[name].get(row, float("inf")))
        finally:
            if args.against:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[args.against])],
                               check=False, capture_output=True)
    print("\n".join(bc.machine_lines()))
    print(f"{args.pngs} PNGs 64x64, inline, best of {args.repeats} x {args.rounds} rounds "
          f"({time.perf_counter() - t0:.0f} s)")
    names = list(trees)
    header = f"{'row':<12}" + "".join(f"{n + ' µs/sample':>22}" for n in names)
    if len(names) == 2:
        header += f"{'this / ' + names[1]:>22}"
    print(header)
    for row in best[names[0]]:
        line = f"{row:<12}" + "".join(f"{best[n][row] / args.pngs * 1e6:>22.1f}" for n in names)
        if len(names) == 2:
            line += f"{best[names[0]][row] / best[names[1]][row]:>22.2f}"
        print(line)


if __name__ == "__main__":
    main()
