"""Batch nodes: ``Batch[T]`` parameters read the collated batch of a
per-sample node; the node runs once per batch, after collation, in the process that
iterates the loader -- never in a DataLoader worker -- on ``device`` when given. The
compiler's rules, ``execute()`` and ``run_sample()`` on batches, pictures."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch

import flowdata as fd
from flowdata.types import read_marker
from tests.batch_cases import waves

N = 10


@pytest.fixture(scope="module")
def dr() -> fd.Driver:
    return fd.Builder().with_modules(waves).build()


def _oracle(indices: list[int]) -> torch.Tensor:
    return torch.stack([waves.power_one(waves.wave(i)) for i in indices])


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_runs_batch_nodes_after_collation_in_this_process(dr: fd.Driver, workers: int) -> None:
    loader = dr.dataloader(["power", "label", "batch_pid", "sample_pid"], inputs={"n": N}, batch_size=4,
                           num_workers=workers)
    batches = list(loader)
    assert [b["power"].shape for b in batches] == [(4, 33), (4, 33), (2, 33)]
    assert list(batches[0]) == ["power", "label", "batch_pid", "sample_pid"]  # as asked, 'wave' not delivered
    assert torch.allclose(torch.cat([b["power"] for b in batches]), _oracle(list(range(N))), atol=1e-4)
    assert torch.cat([b["label"] for b in batches]).tolist() == [i % 3 for i in range(N)]
    # Every batch node ran here; the per-sample nodes ran in the workers when there are any.
    assert set(torch.cat([b["batch_pid"] for b in batches]).tolist()) == {os.getpid()}
    sample_pids = set(torch.cat([b["sample_pid"] for b in batches]).tolist())
    assert (sample_pids == {os.getpid()}) == (workers == 0)
    assert loader.report.node_calls["power"] == N and loader.report.node_seconds["power"] > 0


def test_batch_nodes_read_statistics_and_once_values(dr: fd.Driver) -> None:
    loader = dr.dataloader(["scaled"], inputs={"n": N, "factor": 3.0}, batch_size=5, shuffle=True, seed=1)
    stats = loader.stats["wave_stats"]
    got = list(loader)
    order = [i for b in loader.flow_sampler.batches() for i in b]
    want = _oracle(order) * 3.0 / float(stats.std)
    assert torch.allclose(torch.cat([b["scaled"] for b in got]), want, atol=1e-4)
    # Statistics of pass 1 first, then the batch nodes on the batches of pass 2.
    text = str(dr.plan(["scaled"], inputs={"n": N}))
    assert "feeds:    wave_stats" in text and "batches:  power, scaled (after collation)" in text


def test_device_moves_what_the_batch_nodes_read_first(dr: fd.Driver) -> None:
    # No GPU here: the "meta" device shows the move happened before the batch node ran.
    loader = dr.dataloader(["on_device", "label"], inputs={"n": 4}, batch_size=2, device="meta")
    batch = next(iter(loader))
    assert batch["on_device"] == ["meta", "meta"] and batch["label"].device.type == "meta"


@pytest.mark.procs
def test_a_streaming_loader_runs_them_too(dr: fd.Driver) -> None:
    loader = dr.dataloader(["power", "label"], inputs={"n": N}, batch_size=3, streaming=True, num_workers=2)
    batches = list(loader)
    labels = torch.cat([b["label"] for b in batches]).tolist()
    assert sorted(labels) == sorted(i % 3 for i in range(N))
    assert sum(b["power"].shape[0] for b in batches) == N
    assert all(b["power"].shape[0] == b["label"].shape[0] for b in batches)


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_batch_nodes_get_each_samples_own_generator_and_index(dr: fd.Driver, workers: int) -> None:
    loader = dr.dataloader(["draws", "draw", "index_of"], inputs={"n": N}, batch_size=4, shuffle=True, seed=7,
                           num_workers=workers)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for b in loader:
            assert torch.equal(b["draws"]["draw"], b["draw"])  # the per-sample node's own stream
            assert torch.equal(b["draws"]["index"], b["index_of"])
    out = dr.execute(["draws"], inputs={"n": N}, batch_size=3)["draws"]
    alone = [dr.run_sample(["draw"], index=i, inputs={"n": N})["draw"] for i in range(N)]
    assert torch.equal(torch.cat([d["draw"] for d in out]), torch.stack(alone))
    assert torch.cat([d["index"] for d in out]).tolist() == list(range(N))


def test_a_value_that_is_not_batch_shaped_is_an_error_naming_the_node(dr: fd.Driver) -> None:
    loader = dr.dataloader(["flat"], inputs={"n": N}, batch_size=4)
    with pytest.raises(fd.NodeError, match=r"node 'flat' \(tests/batch_cases/waves.py:\d+\) failed: it returned a "
                       r"0-d value in its value on batch 0 of epoch 0 \(samples 0-3\), which holds 4 samples: a batch "
                       r"node returns one row per sample \(first dimension: the batch\)\n  fix: keep the batch"):
        next(iter(loader))


def test_a_batch_node_that_raises_names_itself_and_the_batch(dr: fd.Driver) -> None:
    loader = dr.dataloader(["picky"], inputs={"n": N}, batch_size=2)
    with pytest.raises(fd.NodeError, match=r"node 'picky' \(tests/batch_cases/waves.py:\d+\) failed: ValueError: no "
                       r"batch may start with label 2 \(on batch 1 of epoch 0 \(samples 2-3\)\)") as info:
        list(loader)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.procs
def test_execute_runs_batch_nodes_on_batches_of_batch_size(dr: fd.Driver) -> None:
    out = dr.execute(["power", "wave_stats"], inputs={"n": N}, batch_size=4)
    assert [p.shape[0] for p in out["power"]] == [4, 4, 2]  # the last batch smaller
    assert torch.allclose(torch.cat(out["power"]), _oracle(list(range(N))), atol=1e-4)
    assert out["wave_stats"].count == N * 64
    with fd.ProcessExecutor(2) as pool:  # an executor given is not closed by flowdata: close it here
        again = dr.execute(["scaled"], inputs={"n": N}, batch_size=3, executor=pool)["scaled"]
    assert [s.shape[0] for s in again] == [3, 3, 3, 1]
    assert torch.allclose(torch.cat(again), _oracle(list(range(N))) * 2.0 / float(out["wave_stats"].std), atol=1e-4)
    with pytest.raises(fd.InputError, match=r"batch_size=0: expected a positive int"):
        dr.execute(["power"], inputs={"n": N}, batch_size=0)


def test_execute_leaves_skipped_samples_out_of_the_batches(dr: fd.Driver) -> None:
    report = fd.Report()
    out = dr.execute(["fragile_sum"], inputs={"n": 8}, batch_size=3, on_error="skip", report=report)
    assert [t.tolist() for t in out["fragile_sum"]] == [[0, 10, 20], [30, 40, 60], [70]]
    assert [s.index for s in report.skipped] == [5]


def test_run_sample_runs_batch_nodes_on_a_batch_of_one(dr: fd.Driver) -> None:
    out = dr.run_sample(["power", "label", "wave"], index=3, inputs={"n": N})
    assert out["power"].shape == (1, 33) and out["label"] == 0 and out["wave"].shape == (64,)
    assert torch.allclose(out["power"][0], waves.power_one(waves.wave(3)), atol=1e-4)
    assert list(out) == ["power", "label", "wave"]


def test_dataset_refuses_batch_nodes(dr: fd.Driver) -> None:
    with pytest.raises(fd.InputError, match=r"dataset\(\) gives per-sample values, but 'power' is a batch node, "
                       r"computed on collated batches where the loader is iterated\n  fix: use dataloader\(\), or ask "
                       r"dataset\(\) for the per-sample values it reads"):
        dr.dataset(["power"], inputs={"n": N})


def test_a_collate_fn_that_returns_no_dict_is_told(dr: fd.Driver) -> None:
    loader = dr.dataloader(["power"], inputs={"n": N}, batch_size=2,
                           collate_fn=lambda rows: [r["wave"] for r in rows])
    with pytest.raises(fd.FlowdataError, match=r"batch node 'power' \(.*\) reads 'wave' from the collated batch, but "
                       r"the batch is a list\n  fix: let collate_fn return a dict keyed by output name"):
        next(iter(loader))


def test_the_marker_reads_back_and_the_picture_draws_batch_nodes(dr: fd.Driver) -> None:
    assert read_marker(fd.Batch[torch.Tensor]) == ("batch", torch.Tensor)
    assert dr.graph.nodes["power"].signature == "power(wave: Batch[torch.Tensor]) -> Batch[torch.Tensor]"
    dot = dr.visualize(outputs=["scaled"]).source
    assert "cluster_tone_batches" in dot and "batches of 'tone', after collation" in dot
    assert "box3d" in dot and 'label="Batch[torch.Tensor]"' in dot and "arrowhead=diamond" in dot
    mermaid = dr.to_mermaid(outputs=["scaled"])
    assert 'n_power[["power · pass 1"]]' in mermaid and "n_wave -.->|Batch| n_power" in mermaid


# --- the compiler's rules ------------------------------------------------------------------

HEAD = """
import torch
from flowdata import Batch, Collect, Parallel


def item(n: int) -> Parallel[int]:
    yield from range(n)


def wave(item: int) -> torch.Tensor:
    return torch.zeros(4) + item


def doubled(wave: Batch[torch.Tensor]) -> Batch[torch.Tensor]:
    return wave * 2
"""

RULES = [
    ("FD210", """
def bad(n: Batch[int]) -> Batch[int]:
    return n
""", r"FD210 batch-outside-group: 'bad' takes 'n' as Batch\[int\], but 'n' is an input: it has one value, not one "
     r"per sample, so there is no batch of it\n    at .*:\d+\n    expected: 'n' computed once per sample \(or by a "
     r"batch node\)\n    actual:   'n' is an input\n    fix: take 'n: int' without Batch"),
    ("FD211", """
def bad(doubled: Batch[torch.Tensor], item: int) -> Batch[torch.Tensor]:
    return doubled
""", r"FD211 batch-needs-marker: 'bad' is a batch node \(it reads Batch\[...\] values\), but takes the per-sample "
     r"value 'item' of group 'item' as int: a batch node is called once per batch\n(.|\n)*fix: annotate the "
     r"parameter as 'item: Batch\[torch.Tensor\]' \(the collated batch\)"),
    ("FD211", """
def bad(doubled: torch.Tensor) -> torch.Tensor:
    return doubled
""", r"FD211 batch-needs-marker: 'bad' reads the batch node 'doubled' as torch.Tensor: its value is a whole batch\n"
     r"(.|\n)*fix: annotate the parameter as 'doubled: Batch\[torch.Tensor\]' and the return as "
     r"'-> Batch\[torch.Tensor\]'"),
    ("FD212", """
def bad(wave: torch.Tensor, doubled: torch.Tensor) -> torch.Tensor:
    return wave + doubled
""", r"FD212 batch-feeds-per-sample: 'bad' reads the per-sample value 'wave' and the batch node 'doubled': a batch "
     r"node runs after collation, in the process that iterates the loader, so it cannot feed per-sample work\n"
     r"(.|\n)*fix: make 'bad' a batch node \(Batch\[...\] parameters and return\), or read the per-sample value "
     r"'doubled' reads instead"),
    ("FD213", """
def bad(doubled: Collect[torch.Tensor]) -> int:
    return len(list(doubled))
""", r"FD213 batch-into-collect: 'bad' collects 'doubled', a batch node: it runs once per batch, after collation, in "
     r"the process that iterates the loader, so no pass can feed its values to a Collect\n(.|\n)*fix: collect the "
     r"per-sample value 'doubled' reads"),
    ("FD214", """
def bad(wave: Batch[torch.Tensor], sample_rng: torch.Generator) -> Batch[torch.Tensor]:
    return wave
""", r"FD214 batch-reads-builtin: batch node 'bad' reads 'sample_rng: torch.Generator', which exists once per "
     r"sample: a batch node receives the batch's\n(.|\n)*fix: annotate it as 'sample_rng: "
     r"Batch\[list\[torch.Generator\]\]' \(one per sample of the batch\)"),
    ("FD215", """
def bad(wave: Batch[torch.Tensor]) -> torch.Tensor:
    return wave
""", r"FD215 batch-return: 'bad' reads Batch\[...\] values, so it runs once per batch, but returns torch.Tensor\n"
     r"(.|\n)*fix: declare '-> Batch\[torch.Tensor\]' \(a value whose first dimension is the batch\)"),
    ("FD215", """
def bad(wave: torch.Tensor) -> Batch[torch.Tensor]:
    return wave
""", r"FD215 batch-return: 'bad' returns Batch\[torch.Tensor\] but reads no batch: nothing makes it run once per "
     r"batch\n(.|\n)*fix: read a per-sample node as 'x: Batch\[...\]', or declare '-> torch.Tensor'"),
    ("FD101", """
def bad(wave: Batch[str]) -> Batch[str]:
    return wave
""", r"FD101 type-mismatch: 'bad' expects 'wave' as Batch\[str\], but node 'wave' returns torch.Tensor"),
]


@pytest.mark.parametrize(("code", "tail", "message"), RULES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(RULES)])
def test_the_compiler_checks_the_rules(build: Callable[..., fd.Driver], code: str, tail: str, message: str) -> None:
    with pytest.raises(fd.GraphError, match=message) as info:
        build(HEAD + tail)
    assert [p.code for p in info.value.problems] == [code]


def test_collated_types_are_accepted(build: Callable[..., fd.Driver]) -> None:
    # ints collate into a tensor, strings into a list of them: neither is a mismatch.
    dr = build(HEAD + """
def label(item: int) -> int:
    return item % 2


def name(item: int) -> str:
    return str(item)


def both(label: Batch[torch.Tensor], name: Batch[list[str]]) -> Batch[list[str]]:
    return [f"{n}:{int(x)}" for n, x in zip(name, label)]
""")
    assert dr.execute(["both"], inputs={"n": 3}, batch_size=2)["both"] == [["0:0", "1:1"], ["2:0"]]


def test_compose_on_a_batch_with_a_generator_per_sample_equals_each_sample_alone() -> None:
    # A batch node's sample_rng is a list of generators: Compose draws each sample's
    # parameters from its own, so the batch equals the per-sample path (two random runs).
    from flowdata.transforms import CenterCrop, Compose, Normalize, RandomAffine, RandomHorizontalFlip

    images = torch.rand(5, 3, 20, 20)
    for fuse in (True, False):
        aug = Compose(RandomAffine(20, translate=(0.1, 0.1)), CenterCrop(16), Normalize([0.5] * 3, [0.2] * 3, dim=-3),
                      RandomHorizontalFlip(0.5), fuse=fuse)
        batch = aug(images, [torch.Generator().manual_seed(i) for i in range(5)])
        alone = torch.stack([aug(images[i], torch.Generator().manual_seed(i)) for i in range(5)])
        assert torch.allclose(batch, alone, atol=1e-5)
    with pytest.raises(ValueError, match=r"Compose: generator is a sequence of 2 \(expected one torch.Generator per "
                       r"sample\), but x is a batch of 5; fix: pass one generator, or one per sample"):
        aug(images, [torch.Generator(), torch.Generator()])


def test_accelerate_prepare_keeps_the_batch_nodes_on_its_device(dr: fd.Driver) -> None:
    # prepare() keeps the flowdata loader; its device becomes the batch nodes' device.
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(dr.dataloader(["on_device", "power"], inputs={"n": 6}, batch_size=3))
    batches = list(loader)
    assert isinstance(loader, fd.DataLoader) and loader.device == accelerator.device
    assert [b["on_device"] for b in batches] == [[accelerator.device.type] * 3] * 2
    assert torch.allclose(torch.cat([b["power"] for b in batches]), _oracle(list(range(6))), atol=1e-4)


def test_the_sample_cache_refuses_a_batch_node(dr: fd.Driver, tmp_path: object) -> None:
    with pytest.raises(fd.InputError, match=r"cache=\['power'\]: 'power' \(tests/batch_cases/waves.py:\d+\) is a "
                       r"batch node, computed on each collated batch where the loader is iterated; only per-sample "
                       r"values are cached\n  fix: cache the per-sample values it reads \('wave'\) instead"):
        dr.dataloader(["power"], inputs={"n": 4}, cache=["power"], cache_dir=str(tmp_path))


def test_sample_index_is_on_the_batch_device(dr: fd.Driver) -> None:
    batch = next(iter(dr.dataloader(["draws"], inputs={"n": 4}, batch_size=2, device="meta")))
    assert batch["draws"]["index"].device.type == "meta"
