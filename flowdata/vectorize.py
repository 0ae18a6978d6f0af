"""``@vectorized``: a per-sample node called once per chunk of samples, on lists.

::

    @vectorized
    def ids(text: Sequence[str], tokenizer: str) -> list[list[int]]:
        return [e.ids for e in load(tokenizer).encode_batch(list(text))]

The node is still a per-sample node -- one value per sample, in the sample's group, cached,
skipped and reported per sample like any other -- but flowdata calls its function once for
a run of samples (a DataLoader batch, an engine chunk) instead of once per sample: every
parameter that reads a per-sample value (a per-sample node, the source's item,
``sample_index``, ``sample_rng``) receives a list with one value per sample, in sample
order; whole values (inputs, config, once nodes, Collect results) arrive as they are, once.
The function returns a sequence of the same length, one value per sample.

Types: a per-sample parameter is annotated as a collection of the per-sample type
(``Sequence[str]`` or ``list[str]``: the per-sample type is its element, checked against the
producer, FD103), and the return as a collection of the value type (``list[list[int]]``:
the node's type is ``list[int]``, FD008); a return declared as ``torch.Tensor`` or
``numpy.ndarray`` is one tensor whose rows (first dimension) are the samples' values, and
the node's type is that same type. So the annotations say what the body receives and
returns, and mypy checks the body as written.

Failures: when the call raises, flowdata calls the function again on one sample at a time
to find the sample that fails; that sample's error is raised (or skipped under
``on_error="skip"``) with its index and item, as for any node, and the other samples keep
the values of those single calls. When it returns the wrong number of values (or not a
sequence), that is the function's fault, not a sample's: an error naming the node, raised
under ``on_error="skip"`` too, never a silent rerun one sample at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["is_vectorized", "vectorized"]

F = TypeVar("F", bound=Callable[..., Any])

_ATTR = "__flowdata_vectorized__"


def vectorized(fn: F) -> F:
    """Marks a per-sample node whose function takes and returns lists, one entry per sample."""
    if not callable(fn):
        raise TypeError(f"@vectorized decorates a function, got {fn!r}")
    setattr(fn, _ATTR, True)
    return fn


def is_vectorized(fn: Callable[..., Any] | None) -> bool:
    """Whether ``fn`` was marked ``@vectorized``."""
    return fn is not None and getattr(fn, _ATTR, False) is True
