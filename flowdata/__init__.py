"""flowdata: a typed dataflow framework for machine-learning data pipelines.

Write plain functions; parameter names name upstream nodes, annotations are types.
``Parallel[T]``/``Sequential[T]`` mark sources, ``Collect[T]`` closes a group::

    import flowdata as fd

    dr = fd.Builder().with_modules(my_module).build()
    dr.execute(["total"], inputs={"n": 10})
"""

from typing import TYPE_CHECKING

from flowdata.driver import Builder, Driver
from flowdata.errors import (
    FlowdataError,
    GraphError,
    GraphProblem,
    InputError,
    MediaError,
    NodeError,
    RankError,
    SampleError,
    WorkerDied,
)
from flowdata.plan import Plan
from flowdata.reduce import reduce
from flowdata.report import Report, Skip, TooManySkipped
from flowdata.types import Batch, Collect, Parallel, Sequential
from flowdata.vectorize import vectorized

if TYPE_CHECKING:
    from flowdata.loader import DataLoader
    from flowdata.run import Executor, InlineExecutor, ProcessExecutor
    from flowdata.run import RayExecutor

__all__ = [
    "Batch",
    "Builder",
    "Collect",
    "DataLoader",
    "Driver",
    "Executor",
    "FlowdataError",
    "GraphError",
    "GraphProblem",
    "InlineExecutor",
    "InputError",
    "MediaError",
    "NodeError",
    "Parallel",
    "Plan",
    "ProcessExecutor",
    "RankError",
    "RayExecutor",
    "Report",
    "SampleError",
    "Sequential",
    "Skip",
    "TooManySkipped",
    "WorkerDied",
    "reduce",
    "vectorized",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Loaded on first use, so that `import flowdata` (and a build, and `flowdata check`)
    # stays light: the training iterator imports torch, the executors multiprocessing.
    if name == "DataLoader":
        from flowdata.loader import DataLoader

        return DataLoader
    if name in ("Executor", "InlineExecutor", "ProcessExecutor"):
        import flowdata.run

        return getattr(flowdata.run, name)
    if name == "RayExecutor":  # Ray itself is imported on first use of the executor
        from flowdata.run import RayExecutor

        return RayExecutor
    raise AttributeError(f"module 'flowdata' has no attribute {name!r}")
