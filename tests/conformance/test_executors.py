"""The conformance suites: every dataflow of tests/dataflows against its oracle.

:class:`ExecutorSuite` is the suite every executor must pass (as dask's
``GetFunctionTestMixin`` is for schedulers): subclass it and give ``make_executor``. It runs
every dataflow through ``execute()``, with adaptive and with tiny chunks, reductions under
``on_error="skip"``, and the loader's statistics pass on that executor. Inline, processes,
Ray (a local Ray started in the test) and two test doubles (a thread pool, and one that
computes tasks out of order) run it here; any later executor adds one subclass.

The loader suite runs every dataflow that declares ``LOADER_OUTPUTS`` through
``dataloader()`` at 0 and 2 DataLoader workers.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import ModuleType
from typing import Any, TypeVar

import pytest

import flowdata as fd
from tests.dataflows import all_dataflows

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")

DATAFLOWS = all_dataflows()
CASES = [(m, i) for m in DATAFLOWS for i in range(len(m.CASES))]


def _ids(case: tuple[ModuleType, int]) -> str:
    return f"{case[0].__name__.rsplit('.', 1)[-1]}-{case[1]}"


def test_every_dataflow_has_an_oracle() -> None:
    assert len(DATAFLOWS) >= 7
    for m in DATAFLOWS:
        assert callable(m._oracle) and m.CASES and m.OUTPUTS, m.__name__


class ThreadExecutor:
    """Test double: tasks run in a thread pool, a bounded window ahead, results in order."""

    def __init__(self, workers: int = 3) -> None:
        self.pool = ThreadPoolExecutor(workers)
        self.tasks = 0

    def map(self, fn: Callable[[C, T], R], tasks: Iterable[T], *, context: C) -> Iterator[R]:
        pending: deque[Future[R]] = deque()
        for task in tasks:
            self.tasks += 1
            pending.append(self.pool.submit(fn, context, task))
            if len(pending) > 4:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def close(self) -> None:
        self.pool.shutdown()


class ShuffledExecutor:
    """Test double: computes each window of tasks in a random order, yields them in order."""

    def __init__(self, seed: int = 0, window: int = 5) -> None:
        self.rng = random.Random(seed)
        self.window = window

    def map(self, fn: Callable[[C, T], R], tasks: Iterable[T], *, context: C) -> Iterator[R]:
        it = iter(tasks)
        while True:
            batch = [t for _, t in zip(range(self.window), it)]
            if not batch:
                return
            order = list(range(len(batch)))
            self.rng.shuffle(order)
            results: dict[int, R] = {i: fn(context, batch[i]) for i in order}
            yield from (results[i] for i in range(len(batch)))


SKIPPING = """
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Count, Stats, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def value(item: int, bad: list[int]) -> float:
    if item in bad:
        raise ValueError(f"bad sample {item}")
    return float(item % 13)

@reduce(Count)
def counted(value: Collect[float]) -> int: ...

@reduce(Welford)
def stats(value: Collect[float]) -> Stats: ...

def listed(value: Collect[float]) -> list[float]:
    return value
"""


class ExecutorSuite:
    """What every executor must do; subclasses give :meth:`make_executor`."""

    @classmethod
    def make_executor(cls) -> object:
        raise NotImplementedError

    @pytest.fixture(scope="class")
    @classmethod
    def executor(cls) -> Iterator[object]:
        ex = cls.make_executor()
        yield ex
        close = getattr(ex, "close", None)
        if close is not None:
            close()

    def test_is_an_executor(self, executor: object) -> None:
        assert executor in ("inline", "processes") or isinstance(executor, fd.Executor)

    @pytest.mark.parametrize("case", CASES, ids=_ids)
    @pytest.mark.parametrize("chunk_size", [None, 3])
    def test_matches_oracle(self, case: tuple[ModuleType, int], chunk_size: int | None, executor: object) -> None:
        module, i = case
        inputs: dict[str, Any] = module.CASES[i]
        dr = fd.Builder().with_modules(module).build()
        got = dr.execute(module.OUTPUTS, inputs=inputs, executor=executor, chunk_size=chunk_size)
        assert got == module._oracle(**inputs)

    @pytest.mark.parametrize("bad", [list(range(64)), list(range(0, 200, 3)), list(range(1, 200))])
    def test_reductions_under_skip(self, build: Callable[..., fd.Driver], executor: object, bad: list[int]) -> None:
        dr = build(SKIPPING)
        inline = dr.execute(["counted", "stats", "listed"], inputs={"n": 200, "bad": bad}, on_error="skip")
        got = dr.execute(["counted", "stats", "listed"], inputs={"n": 200, "bad": bad}, on_error="skip",
                         executor=executor, chunk_size=7)
        survivors = [float(i % 13) for i in range(200) if i not in bad]
        assert got["counted"] == inline["counted"] == len(survivors)
        assert got["listed"] == survivors
        for field in ("mean", "var", "min", "max", "count"):
            assert getattr(got["stats"], field).numpy().tobytes() == getattr(inline["stats"], field).numpy().tobytes()

    def test_loader_statistics_pass(self, executor: object) -> None:
        module = next(m for m in DATAFLOWS if m.__name__.endswith("two_pass"))
        inputs = module.CASES[2]
        dr = fd.Builder().with_modules(module).build()
        base = dr.dataloader(module.LOADER_OUTPUTS, inputs=inputs, batch_size=64)
        loader = dr.dataloader(module.LOADER_OUTPUTS, inputs=inputs, batch_size=64, executor=executor)
        assert loader.stats == base.stats and loader.stats
        got = [v for b in loader for v in b[module.LOADER_OUTPUTS[0]].tolist()]
        assert got == [v for b in base for v in b[module.LOADER_OUTPUTS[0]].tolist()]


class TestInline(ExecutorSuite):
    @classmethod
    def make_executor(cls) -> object:
        return "inline"


@pytest.mark.procs
class TestProcesses(ExecutorSuite):
    @classmethod
    def make_executor(cls) -> object:
        return fd.ProcessExecutor(num_workers=2)


@pytest.mark.ray
class TestRay(ExecutorSuite):
    """A real local Ray, started here as a user would (the executor uses it as it is)."""

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def local_ray(cls) -> Iterator[None]:
        import ray

        ray.init(num_cpus=2)
        try:
            yield
        finally:
            ray.shutdown()

    @classmethod
    def make_executor(cls) -> object:
        return fd.RayExecutor()


class TestThreads(ExecutorSuite):
    @classmethod
    def make_executor(cls) -> object:
        return ThreadExecutor()


class TestShuffled(ExecutorSuite):
    @classmethod
    def make_executor(cls) -> object:
        return ShuffledExecutor()


def test_an_old_style_executor_is_refused() -> None:
    class OldStyle:
        def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
            return map(fn, tasks)

    module = DATAFLOWS[0]
    dr = fd.Builder().with_modules(module).build()
    with pytest.raises(fd.FlowdataError, match=r"has no map\(fn, tasks, \*, context\) method"):
        dr.execute(module.OUTPUTS, inputs=module.CASES[0], executor=OldStyle())


@pytest.mark.procs
def test_process_workers_get_the_pass_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The context travels once per map call, not with every chunk: tasks are small."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    sent: list[int] = []
    submit = ProcessPoolExecutor.submit

    def counting(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        sent.append(len(pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)))
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "submit", counting)
    module = next(m for m in DATAFLOWS if m.__name__.endswith("two_pass"))
    dr = fd.Builder().with_modules(module).build()
    big = {"values": [float(i % 7) for i in range(20_000)]}
    with fd.ProcessExecutor(num_workers=2) as ex:
        dr.execute(["normalized_max"], inputs=big, executor=ex, chunk_size=100)
    assert len(sent) >= 20_000 // 100
    per_chunk = sum(sent) / len(sent)
    # A chunk of 100 floats and its indices pickles to a few kB; the whole values the
    # pass reads (the 20,000-value input among them) would add about 180 kB to each.
    assert per_chunk < 5_000, per_chunk


LOADER_CASES = [(m, i) for m in DATAFLOWS if hasattr(m, "LOADER_OUTPUTS") for i in range(len(m.CASES))]


def _flatten(value: Any) -> list[Any]:
    return value.tolist() if hasattr(value, "tolist") else list(value)


def test_loader_dataflows_cover_most_modules() -> None:
    assert len({m for m, _ in LOADER_CASES}) >= 6


@pytest.mark.parametrize("case", LOADER_CASES, ids=_ids)
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.procs)])
def test_loader_matches_oracle(case: tuple[ModuleType, int], workers: int) -> None:
    module, i = case
    inputs: dict[str, Any] = module.CASES[i]
    expected = module._loader_oracle(**inputs)
    dr = fd.Builder().with_modules(module).build()
    n = len(next(iter(expected.values())))
    if n == 0:
        loader = dr.dataloader(module.LOADER_OUTPUTS, inputs=inputs, batch_size=7, num_workers=workers)
        assert [b for b in loader] == []
        return
    loader = dr.dataloader(module.LOADER_OUTPUTS, inputs=inputs, batch_size=7, num_workers=workers)
    got: dict[str, list[Any]] = {k: [] for k in module.LOADER_OUTPUTS}
    for batch in loader:
        for k in module.LOADER_OUTPUTS:
            got[k] += _flatten(batch[k])
    assert got == expected
