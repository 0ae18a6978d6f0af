"""A training loop under the real Accelerate over a flowdata loader, as one process of a
group (the test starts every rank with torchrun's environment variables, gloo on
127.0.0.1). Prints ``RESULT <rank> <json>``: the samples each epoch trained on, the skips
the loader reported, and the epochs' ``end_of_dataloader`` flags.

    python accelerate_run.py NUM_WORKERS [N]

With ``N`` it trains on ``N`` samples (22 otherwise, sample 5 failing and skipped), then evaluates them: every batch of
an evaluation loader through ``accelerator.gather_for_metrics``, which the result lists
under ``gathered`` (on every rank).
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
from accelerate import Accelerator

import flowdata as fd
from flowdata import Parallel


def item(n: int) -> Parallel[int]:
    yield from range(n)


def x(item: int) -> torch.Tensor:
    if item == int(os.environ.get("FD_BROKEN", "5")):
        raise ValueError("sample 5 is broken")
    return torch.tensor([float(item)])


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    workers = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 22
    if len(sys.argv) > 2:
        os.environ["FD_BROKEN"] = "-1"  # every sample trains (a batch whose every sample is skipped is empty)
    accelerator = Accelerator(cpu=True)
    dr = fd.Builder().with_modules(sys.modules[__name__]).build()
    loader = dr.dataloader(["item", "x"], inputs={"n": n}, batch_size=4, shuffle=True, seed=3,
                           num_workers=workers, on_error="skip")
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    seen: dict[int, list[int]] = {}
    ends: dict[int, list[bool]] = {}
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            with accelerator.accumulate(model):
                loss = model(batch["x"]).pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            seen.setdefault(epoch, []).extend(batch["item"].tolist())
            ends.setdefault(epoch, []).append(accelerator.gradient_state.end_of_dataloader)
    gathered: list[int] = []
    evaluated_padding = 0
    if len(sys.argv) > 2:
        evaluation = accelerator.prepare(dr.dataloader(["item"], inputs={"n": n}, batch_size=4, num_workers=workers))
        for batch in evaluation:
            gathered.extend(accelerator.gather_for_metrics(batch["item"]).tolist())
        evaluated_padding = evaluation.report.padded
    result = {"seen": seen, "ends": ends, "skipped": sorted(s.index for s in loader.report.skipped),
              "type": type(loader).__name__, "gathered": gathered,
              "padded": evaluated_padding}
    os.write(1, f"RESULT {accelerator.process_index} {json.dumps(result)}\n".encode())
