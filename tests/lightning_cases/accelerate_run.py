"""A training loop under the real Accelerate over a flowdata loader, as one process of a
group (the test starts every rank with torchrun's environment variables, gloo on
127.0.0.1). Prints ``RESULT <rank> <json>``: the samples each epoch trained on, the skips
the loader reported, and the epochs' ``end_of_dataloader`` flags.

    python accelerate_run.py NUM_WORKERS
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
    if item == 5:
        raise ValueError("sample 5 is broken")
    return torch.tensor([float(item)])


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    workers = int(sys.argv[1])
    accelerator = Accelerator(cpu=True)
    dr = fd.Builder().with_modules(sys.modules[__name__]).build()
    loader = dr.dataloader(["item", "x"], inputs={"n": 22}, batch_size=4, shuffle=True, seed=3,
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
    result = {"seen": seen, "ends": ends, "skipped": sorted(s.index for s in loader.report.skipped),
              "type": type(loader).__name__}
    os.write(1, f"RESULT {accelerator.process_index} {json.dumps(result)}\n".encode())
