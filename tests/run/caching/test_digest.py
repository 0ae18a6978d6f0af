"""Cache keys of whole values: torch modules by content, stable across instances and runs."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from flowdata.run.caching.passcache import digest  # noqa: E402
from flowdata.transforms import LogMel, Normalize  # noqa: E402


class Settings(nn.Module):
    def __init__(self, k: float, fn: object = None, cls: type = nn.ReLU):
        super().__init__()
        self._k = k
        self.fn = fn
        self.cls = cls
        self.register_buffer("scratch", torch.tensor([k]), persistent=False)


def test_equal_modules_have_equal_keys() -> None:
    assert digest(LogMel(n_mels=16)) == digest(LogMel(n_mels=16))
    assert digest(Normalize([1.0, 2.0], [1.0, 1.0])) == digest(Normalize([1.0, 2.0], [1.0, 1.0]))
    assert digest(Settings(1, functools.partial(max, 3))) == digest(Settings(1, functools.partial(max, 3)))


@pytest.mark.parametrize(("a", "b"), [
    (lambda: LogMel(n_mels=16), lambda: LogMel(n_mels=32)),
    (lambda: LogMel(sample_rate=8000), lambda: LogMel(sample_rate=16000)),
    (lambda: Normalize([1.0], [1.0]), lambda: Normalize([1.0], [2.0])),
    (lambda: Settings(2), lambda: Settings(3)),  # a private setting and a non-persistent buffer
    (lambda: Settings(1, lambda x: x * 2), lambda: Settings(1, lambda x: x * 3)),
    (lambda: Settings(1, cls=nn.BatchNorm1d), lambda: Settings(1, cls=nn.LayerNorm)),
    (lambda: Settings(1), lambda: Settings(1).eval()),
])
def test_different_modules_have_different_keys(a: object, b: object) -> None:
    assert digest(a()) != digest(b())  # type: ignore[operator]


def test_classes_and_cycles_are_keys_too() -> None:
    assert digest(nn.GELU) != digest(nn.ReLU)
    module = Settings(1)
    module.peers = [module]
    assert digest(module) == digest(module)


@pytest.mark.procs
def test_keys_are_the_same_in_another_process() -> None:
    code = "from flowdata.run.caching.passcache import digest; from flowdata.transforms import LogMel; print(digest(LogMel(n_mels=16)))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == digest(LogMel(n_mels=16))


# --- torch modules of every kind ----------------------------------------------------------


def _recurrent() -> torch.nn.Module:
    return torch.nn.LSTM(3, 3)


@pytest.mark.parametrize("make", [_recurrent, lambda: torch.nn.GRU(3, 3), lambda: torch.nn.MultiheadAttention(4, 2),
                                  lambda: torch.jit.script(torch.nn.Linear(2, 2)),
                                  lambda: torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(2, 2))],
                         ids=["LSTM", "GRU", "MultiheadAttention", "ScriptModule", "weight_norm"])
def test_the_key_of_a_torch_module_of_any_kind_sees_its_weights(make: Callable[[], torch.nn.Module]) -> None:
    from flowdata.run.caching.passcache import digest

    torch.manual_seed(0)
    module = make()
    torch.manual_seed(0)
    assert digest(module) == digest(make())  # equal modules, equal keys (their pickles differ)
    before = digest(module)
    with torch.no_grad():
        next(iter(module.parameters())).add_(1.0)
    assert digest(module) != before
