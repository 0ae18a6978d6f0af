"""Batch-node benchmark: log-mel once per collated batch vs per sample in the workers.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_batch_nodes.py            # 2,048 clips
    .venv/bin/python tests/benchmarks/bench_batch_nodes.py --quick    # 512

Data (written once into a temporary folder, never timed): ``--clips`` one-second 16 kHz
tones (16-bit WAV) in two class folders. Both contenders use ``flowdata_modules.audio``:
the workers decode each clip (``waveform``, soundfile); then

- *per sample*: the module's ``log_mel`` (64 bands, 25 ms windows every 10 ms) runs per
  sample in the DataLoader workers (or the calling process with 0 workers), and the loader
  delivers ``log_mel``;
- *batch node*: ``tests/benchmarks/batch_mel_flow.py``'s ``log_mel_batch`` runs the same
  transform once per collated batch of ``waveform`` in the process that iterates the loader.

For ``num_workers`` in {0, 2}, the contenders take turns, best of ``--rounds``; time is the
wall time of one epoch (``batch_size=64``), the loader built beforehand (the module's
``mel`` once node is built then). The outputs are checked equal (within float32 rounding).
torch's threads: the defaults (the calling process uses every core; DataLoader workers one
thread each, as torch sets them), or ``--threads N`` in the calling process.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from bench_common import machine_lines, version  # noqa: E402
from bench_sample_cache import write_wavs  # noqa: E402


def epoch(loader: Any, output: str) -> tuple[float, Any]:
    import torch

    t0 = time.perf_counter()
    values = [b[output] for b in loader]
    seconds = time.perf_counter() - t0
    return seconds, torch.cat(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clips", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads in the calling process (default: torch's, one per core)")
    args = parser.parse_args()
    n = args.clips or (512 if args.quick else 2048)

    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    import batch_mel_flow
    import flowdata as fd
    from flowdata_modules import audio

    dr = fd.Builder().with_modules(audio, batch_mel_flow).build()
    best: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        write_wavs(Path(tmp), n)
        for r in range(args.rounds):
            for workers in (0, 2):
                got = {}
                for name, output in (("per sample", "log_mel"), ("batch node", "log_mel_batch")):
                    loader = dr.dataloader([output], inputs={"manifest": tmp}, batch_size=64, num_workers=workers)
                    seconds, got[name] = epoch(loader, output)
                    best[(name, workers)] = min(best.get((name, workers), float("inf")), seconds)
                    print(f"  round {r + 1}: workers={workers} {name}: {seconds:.2f} s", file=sys.stderr)
                assert torch.allclose(got["per sample"], got["batch node"], atol=1e-4), "the outputs differ"
    for line in machine_lines():
        print(line)
    print(f"torch {version('torch')}, torchaudio {version('torchaudio')}; {n} clips of 1 s at 16 kHz, batch 64, "
          f"best of {args.rounds} rounds; torch threads in this process: {torch.get_num_threads()}; "
          f"GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
    print(f"\n{'workers':>7} {'per sample s':>12} {'batch node s':>12} {'per sample / batch node':>24}")
    for workers in (0, 2):
        a, b = best[("per sample", workers)], best[("batch node", workers)]
        print(f"{workers:7d} {a:12.2f} {b:12.2f} {a / b:23.2f}x")


if __name__ == "__main__":
    main()
