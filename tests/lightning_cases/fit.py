"""A Lightning run over a flowdata loader, as a script (Lightning's DDP launcher runs the
script again for every rank). Prints ``RESULT <rank> <json of the samples seen per epoch>``.

    python fit.py DEVICES STRATEGY NUM_WORKERS [N]

With ``N`` (the number of samples; 22 otherwise) it validates too, on a flowdata loader
over the same samples, and prints ``VALIDATED <rank> <json>``: per epoch, the samples each
validation step evaluated, the rows that repeat a sample (``loader.padding(batch_idx)``)
left out.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

import lightning as L
import torch

import flowdata as fd
from flowdata import Parallel


def item(n: int) -> Parallel[int]:
    yield from range(n)


def x(item: int) -> torch.Tensor:
    return torch.tensor([float(item)])


class Model(L.LightningModule):
    """Records which samples each epoch trains on."""

    def __init__(self, workers: int, n: int = 22, validate: bool = False) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(1, 1)
        self.workers = workers
        self.n = n
        self.validate = validate
        self.seen: dict[int, list[int]] = {}
        self.validated: dict[int, list[int]] = {}

    def training_step(self, batch: dict[str, Any], index: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).extend(batch["item"].tolist())
        out: torch.Tensor = self.lin(batch["x"]).pow(2).mean()
        return out

    def validation_step(self, batch: dict[str, Any], index: int) -> None:
        padding = self.trainer.val_dataloaders.padding(index)  # rows that repeat a sample to even the ranks
        items = batch["item"].tolist()
        self.validated.setdefault(self.current_epoch, []).extend(items[: len(items) - padding])

    def val_dataloader(self) -> Any:
        if not self.validate:
            return []
        dr = fd.Builder().with_modules(sys.modules[__name__]).build()
        return dr.dataloader(["item", "x"], inputs={"n": self.n}, batch_size=4, num_workers=self.workers)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> fd.DataLoader:
        dr = fd.Builder().with_modules(sys.modules[__name__]).build()
        return dr.dataloader(["item", "x"], inputs={"n": self.n}, batch_size=4, shuffle=True, seed=3,
                             num_workers=self.workers)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    devices, strategy, workers = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 22
    model = Model(workers, n, validate=len(sys.argv) > 4)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=devices, strategy=strategy, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0)
    trainer.fit(model)
    # One write per line: the ranks share the pipe, and print() may interleave them.
    os.write(1, f"RESULT {trainer.global_rank} {json.dumps(model.seen)}\n".encode())
    os.write(1, f"VALIDATED {trainer.global_rank} {json.dumps(model.validated)}\n".encode())
