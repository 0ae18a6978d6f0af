"""Fault injection: each test is named after the fault it injects; nothing is lost or stale,
nothing hangs, and every failure says what happened."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flowdata as fd
from flowdata.run.caching.passcache import PassCache

STATS = """
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def x(n: int) -> Parallel[float]:
    yield from (float(i % 17) for i in range(n))

@reduce(Welford)
def stats(x: Collect[float]) -> Stats: ...
"""


def _same(a: Any, b: Any) -> bool:
    return all(getattr(a, f).numpy().tobytes() == getattr(b, f).numpy().tobytes() for f in ("mean", "var", "count"))


def test_two_writers_store_the_same_entry_at_once(tmp_path: Path) -> None:
    cache = PassCache(tmp_path)
    states = {"stats": {"a": np.arange(3.0)}}
    errors: list[BaseException] = []
    entries: list[str | None] = []

    def store() -> None:
        try:
            entries.append(cache.store("k" * 64, states, {}))
        except BaseException as exc:  # what a crashing writer would leave
            errors.append(exc)

    threads = [threading.Thread(target=store) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(entries)) == 1 and entries[0] is not None
    loaded = cache.load("k" * 64, ["stats"])
    assert loaded is not None and loaded["stats"]["a"].tolist() == [0.0, 1.0, 2.0]
    assert [p.name for p in tmp_path.iterdir()] == [Path(entries[0]).name]  # no temporary left


def _run_pass(module_dir: str, cache_dir: str, queue: Any) -> None:
    import sys

    sys.path.insert(0, module_dir)
    import stats_flow

    dr = fd.Builder().with_modules(stats_flow).build()
    out = dr.execute(["stats"], inputs={"n": 5000}, cache_dir=cache_dir)["stats"]
    queue.put(float(out.mean))


def test_several_processes_share_one_cache_dir(tmp_path: Path) -> None:
    (tmp_path / "stats_flow.py").write_text(STATS)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_run_pass, args=(str(tmp_path), str(tmp_path / "cache"), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    means = [queue.get(timeout=5) for _ in procs]
    assert len(set(means)) == 1
    assert len(list((tmp_path / "cache").glob("pass-*"))) == 1


def test_a_file_in_the_way_of_cache_dir(build: Callable[..., fd.Driver], tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    dr = build(STATS)
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    expected = dr.execute(["stats"], inputs={"n": 300})["stats"]
    with caplog.at_level(logging.WARNING, logger="flowdata.cache"):
        got = dr.execute(["stats"], inputs={"n": 300}, cache_dir=blocker)["stats"]
        again = dr.execute(["stats"], inputs={"n": 300}, cache_dir=blocker)["stats"]
    assert _same(got, expected) and _same(again, expected)
    warnings = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(warnings) == 1 and str(blocker) in warnings[0], warnings
    assert blocker.read_text() == "not a folder"
    loader = dr.dataloader(["x"], inputs={"n": 10}, cache_dir=blocker, batch_size=5)
    assert [v for b in loader for v in b["x"].tolist()] == [float(i % 17) for i in range(10)]


def test_an_entry_with_matching_checksums_but_the_wrong_layout(build: Callable[..., fd.Driver], tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    import hashlib
    import io

    dr = build(STATS)
    expected = dr.execute(["stats"], inputs={"n": 300}, cache_dir=tmp_path)["stats"]
    (entry,) = tmp_path.glob("pass-*")
    manifest = json.loads((entry / "manifest.json").read_text())
    meta = manifest["nodes"]["stats"]
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, unrelated=np.zeros(2))  # a valid file of the wrong layout
    (entry / meta["file"]).write_bytes(buf.getvalue())
    meta["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    (entry / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        got = dr.execute(["stats"], inputs={"n": 300}, cache_dir=tmp_path)["stats"]
    assert _same(got, expected)
    assert any("does not restore" in r.getMessage() for r in caplog.records)


LOADER = """
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Count

def item(n: int, bad: list[int]) -> Parallel[int]:
    yield from range(n)

def value(item: int, bad: list[int]) -> int:
    if item in bad:
        raise ValueError(f"bad sample {item}")
    return item

@reduce(Count)
def counted(value: Collect[int]) -> int: ...

def shifted(value: int, counted: int) -> int:
    return value + 1000 * counted
"""


def _train(loader: Any, epochs: int, crash_at: int | None, seen: list[tuple[int, int]]) -> Any:
    """The docs' training loop; saves a checkpoint after every step and after every epoch.
    Returns the checkpoint when it 'crashes' after ``crash_at`` checkpoints, else None."""
    saves = 0
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            seen.extend((epoch, int(v)) for v in batch["value"])
            state, saves = loader.state_dict(), saves + 1
            if saves == crash_at:
                return state
        state, saves = loader.state_dict(), saves + 1
        if saves == crash_at:
            return state
    return None


def test_a_crash_at_any_checkpoint_of_the_training_loop(build: Callable[..., fd.Driver]) -> None:
    dr = build(LOADER)
    args: dict[str, Any] = dict(inputs={"n": 20, "bad": []}, batch_size=6, shuffle=True, seed=3)
    epochs, per_epoch = 3, 4  # 20 samples in batches of 6
    for crash_at in range(1, epochs * (per_epoch + 1) + 1):
        seen: list[tuple[int, int]] = []
        state = _train(dr.dataloader(["value"], **args), epochs, crash_at, seen)
        resumed = dr.dataloader(["value"], **args)
        if state is not None:
            resumed.load_state_dict(state)
            _train(resumed, epochs, None, seen)
        assert sorted(seen) == [(e, i) for e in range(epochs) for i in range(20)], crash_at


def test_a_warm_pass_cache_deals_the_samples_a_cold_run_skipped(build: Callable[..., fd.Driver], tmp_path: Path) -> None:
    dr = build(LOADER)
    args: dict[str, Any] = dict(inputs={"n": 30, "bad": [3, 11, 17]}, batch_size=4, shuffle=True, seed=1,
                                on_error="skip", cache_dir=tmp_path)
    cold = dr.dataloader(["shifted"], **args)
    it = iter(cold)
    head = [next(it)["shifted"].tolist() for _ in range(2)]
    state = cold.state_dict()
    warm = dr.dataloader(["shifted"], **args)  # pass 1 comes from the cache
    assert warm.stats == cold.stats == {"counted": 27}
    assert sorted(s.index for s in warm.report.skipped) == [3, 11, 17]
    warm.load_state_dict(state)
    rest = [b["shifted"].tolist() for b in warm]
    full = [b["shifted"].tolist() for b in dr.dataloader(["shifted"], **args)]
    assert head + rest == full
    # Under on_error="raise", an entry stored by a run that skipped samples is not used.
    with pytest.raises(fd.SampleError, match=r"bad sample 3"):
        dr.dataloader(["shifted"], **{**args, "on_error": "raise"})


@pytest.mark.parametrize("tamper", [{"batches_served": -1}, {"batches_served": 10**6}, {"batches_served": "2"},
                                    {"epoch": -3}, {"epoch": True}, {"version": 7}])
def test_a_tampered_position(build: Callable[..., fd.Driver], tamper: dict[str, Any]) -> None:
    dr = build(LOADER)
    loader = dr.dataloader(["value"], inputs={"n": 20, "bad": []}, batch_size=6)
    state = {**loader.state_dict(), **tamper}
    with pytest.raises(fd.FlowdataError, match=r"cannot resume: the saved position is impossible"):
        dr.dataloader(["value"], inputs={"n": 20, "bad": []}, batch_size=6).load_state_dict(state)


def test_a_folder_manifest_with_a_link_back_to_its_root(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import flowdata_modules.image as image

    root = tmp_path / "data"
    for label, names in (("cat", ["a.png", "b.png"]), ("dog", ["c.png", "d.png"])):
        (root / label).mkdir(parents=True)
        for name in names:
            (root / label / name).write_bytes(b"not decoded here")
    (root / "cat" / "up").symlink_to("..")  # cat/up -> data: a loop
    (root / "dog" / "also_a.png").symlink_to(root / "cat" / "a.png")  # one real file, two ways in
    dr = fd.Builder().with_modules(image).build()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        loader = dr.dataloader(["row", "label_name"], inputs={"manifest": str(root)}, batch_size=10)
        rows = [(Path(p).relative_to(root).as_posix(), lab)
                for b in loader for p, lab in zip(b["row"]["path"], b["label_name"], strict=True)]
    assert rows == [("cat/a.png", "cat"), ("cat/b.png", "cat"), ("dog/c.png", "dog"), ("dog/d.png", "dog")]
    loops = [r.getMessage() for r in caplog.records if "reached again through a symbolic link" in r.getMessage()]
    assert len(loops) == 1 and "cat/up" in loops[0]


COLLATE = """
import torch
from flowdata import Parallel

def item(n: int) -> Parallel[int]:
    yield from range(n)

def ragged(item: int) -> torch.Tensor:
    return torch.zeros(1 + item % 2)

def sometimes_none(item: int) -> int | None:
    return None if item == 5 else item

def stops(item: int) -> int:
    if item == 2:
        raise SystemExit(3)
    return item
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_that_cannot_be_collated(build: Callable[..., fd.Driver], workers: int) -> None:
    dr = build(COLLATE)
    loader = dr.dataloader(["ragged"], inputs={"n": 8}, batch_size=4, num_workers=workers)
    with pytest.raises(fd.FlowdataError, match=r"output 'ragged' could not be collated into a batch of samples \[0, 1, 2, 3\] \(group 'item'\): RuntimeError: .*\n  fix: make every sample's value the same shape"):
        list(loader)
    loader = dr.dataloader(["sometimes_none"], inputs={"n": 8}, batch_size=4, num_workers=workers)
    with pytest.raises(fd.FlowdataError, match=r"output 'sometimes_none' could not be collated into a batch of samples \[4, 5, 6, 7\]"):
        list(loader)


def test_a_node_that_calls_sys_exit(build: Callable[..., fd.Driver]) -> None:
    dr = build(COLLATE)
    with pytest.raises(fd.SampleError, match=r"node 'stops' \(.*:14\) failed on sample 2 of group 'item'.*SystemExit: 3"):
        dr.run_sample(["stops"], index=2, inputs={"n": 4})
    loader = dr.dataloader(["stops"], inputs={"n": 4}, batch_size=4, on_error="skip")
    assert [v for b in loader for v in b["stops"].tolist()] == [0, 1, 3]
    assert [s.index for s in loader.report.skipped] == [2]


FAILING_SOURCE = """
from flowdata import Parallel

def item(n: int) -> Parallel[int]:
    for i in range(n):
        if i == 70_000:
            raise OSError("disk gone")
        yield i

def doubled(item: int) -> int:
    return 2 * item
"""


def test_an_index_build_that_fails_leaves_nothing(build: Callable[..., fd.Driver], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    stale = temp / "flowdata-index-999999999-abc"  # a killed run's index (no such pid)
    stale.mkdir()
    (stale / "item-1.arrow").write_bytes(b"x")
    dr = build(FAILING_SOURCE)
    with pytest.raises(fd.NodeError, match=r"OSError: disk gone \(while producing sample 70000\)"):
        dr.dataloader(["doubled"], inputs={"n": 100_000})
    assert list(temp.iterdir()) == []  # neither this run's partial index nor the stale one
    cache = tmp_path / "cache"
    with pytest.raises(fd.NodeError, match=r"disk gone"):
        dr.dataloader(["doubled"], inputs={"n": 100_000}, cache_dir=cache)
    assert list(cache.glob("*.arrow")) == []


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # Pillow's own, then ours
def test_a_small_file_that_declares_a_huge_image(tmp_path: Path) -> None:
    from PIL import Image

    from flowdata.media import load_image

    path = tmp_path / "huge.png"
    Image.new("L", (10000, 9100)).save(path)  # a few hundred kB: zeros compress well
    assert path.stat().st_size < 1_000_000
    with pytest.raises(fd.MediaError, match=r"huge.png: declares 10000x9100 = 91 megapixels, above max_pixels=90,000,000"):
        load_image(path)
    small = tmp_path / "small.png"
    Image.new("RGB", (40, 30)).save(small)
    with pytest.raises(fd.MediaError, match=r"declares 40x30 = 0 megapixels, above max_pixels=1,000"):
        load_image(small, max_pixels=1000)
    assert tuple(load_image(small).shape) == (3, 30, 40)


def test_a_decompression_bomb_names_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    from flowdata.media import load_image

    path = tmp_path / "bomb.png"
    Image.new("L", (400, 300)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow's bomb check fires at twice this
    with pytest.raises(fd.MediaError, match=r"bomb.png: is far too large to decode \(.*\)"):
        load_image(path, max_pixels=None)


def test_a_jpeg_is_decoded_at_a_reduced_scale_when_that_is_enough(tmp_path: Path) -> None:
    from PIL import Image

    from flowdata.media import load_image

    path = tmp_path / "photo.jpg"
    Image.new("RGB", (800, 600), (200, 30, 30)).save(path, quality=95)
    assert tuple(load_image(path).shape) == (3, 600, 800)
    assert tuple(load_image(path, draft=(100, 75)).shape) == (3, 75, 100)  # 1/8 of the size
    assert tuple(load_image(path, draft=(300, 200)).shape) == (3, 300, 400)  # 1/2 still covers it


def test_a_wav_whose_header_says_one_hertz(tmp_path: Path) -> None:
    import soundfile as sf

    from flowdata.media import load_audio

    path = tmp_path / "slow.wav"
    sf.write(path, np.zeros(8000, dtype=np.float32), 1)  # 8 KB of samples, 8000 s long
    with pytest.raises(fd.MediaError, match=r"slow.wav: declares 8000 frames at 1 Hz = 8,000 s, above max_seconds=3600"):
        load_audio(path, sample_rate=16000)
    wave, rate = load_audio(path, max_seconds=None)
    assert rate == 1 and tuple(wave.shape) == (1, 8000)


def test_a_constant_feature(caplog: pytest.LogCaptureFixture) -> None:
    import torch

    from flowdata.stats import Welford
    from flowdata.transforms import Normalize

    rows = torch.stack([torch.tensor([float(i), 5.0, -float(i)]) for i in range(10)])
    w = Welford(dim=0)
    w.update(rows)
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        norm = Normalize.from_stats(w.result())
    out = norm(rows)
    assert torch.isfinite(out).all() and out[:, 1].abs().max() == 0  # the constant column is 0
    assert torch.allclose(out[:, 0].mean(), torch.tensor(0.0), atol=1e-6)
    messages = [r.getMessage() for r in caplog.records if "constant" in r.getMessage()]
    assert messages == ["Normalize: 1 of 3 features have a standard deviation below 1e-08 (constant): "
                        "they normalise to 0 (positions 1)"]


MUTABLE = """
import os
import numpy as np
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

SCALE = {scale}
CALLS = []

def _helper(v: float) -> float:
    return v * {helper}

def unrelated(n: int) -> int:
    {unrelated}
    return n

def clip(folder: str, n: int) -> Parallel[dict[str, list[str]]]:
    for i in range(n):
        yield {{"frames": [os.path.join(folder, f"f{{i}}-{{j}}.npy") for j in range(2)]}}

def value(clip: dict[str, list[str]], data_path: str) -> float:
    CALLS.append(1)
    frames = sum(float(np.load(p)[0]) for p in clip["frames"])
    return _helper(frames * SCALE + float(np.load(data_path)[0]))

@reduce(Welford)
def stats(value: Collect[float]) -> Stats: ...
"""


def test_the_pass_cache_misses_whenever_what_the_pass_reads_changes(make_module: Callable[[str], Any],
                                                                    tmp_path: Path) -> None:
    import shutil
    import time

    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(6):
        for j in range(2):
            np.save(folder / f"f{i}-{j}.npy", np.array([float(i + j)]))
    data = tmp_path / "table.npy"
    np.save(data, np.array([3.0]))
    cache = tmp_path / "cache"
    inputs = {"folder": str(folder), "n": 6, "data_path": str(data)}
    base = {"scale": "1.0", "helper": "2.0", "unrelated": "pass"}

    def computed(cache_dir: Path = cache, **change: str) -> bool:
        """Runs the pass; True when it was computed (a miss), False when loaded (a hit)."""
        module = make_module(MUTABLE.format(**{**base, **change}))
        dr = fd.Builder().with_modules(module).build()
        dr.execute(["stats"], inputs=inputs, cache_dir=cache_dir)
        return bool(module.CALLS)

    assert computed()  # cold
    assert not computed()  # the same code, in a module of another name: a hit
    assert not computed(unrelated="x = 1  # reformatted, and a comment")  # not reached: a hit
    moved = tmp_path / "moved"
    shutil.copytree(cache, moved)
    assert not computed(cache_dir=moved)  # the cache folder moved: a hit
    assert computed(scale="100.0")  # a module constant the node reads
    assert computed(helper="3.0")  # a private helper the node calls
    np.save(data, np.array([4.0, 0.0]))  # a data file named by an input
    assert computed()
    assert not computed()
    time.sleep(0.01)
    np.save(folder / "f2-1.npy", np.array([9.0]))  # a file named deep inside an item
    os.utime(folder / "f2-1.npy", ns=(time.time_ns(), time.time_ns()))
    assert computed()
    assert not computed()


NAN = """
import math
import torch
from flowdata import Collect, {kind}, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> {kind}[int]:
    yield from range(n)

def feature(item: int) -> torch.Tensor:
    if item == 7:
        return torch.tensor([1.0, math.nan])
    if item == 9:
        return torch.tensor([math.inf, 0.0])
    return torch.tensor([float(item), 1.0])

@reduce(Welford, dim=0)
def stats(feature: Collect[torch.Tensor]) -> Stats: ...

@reduce(Welford, dim=0, nan="propagate")
def raw_stats(feature: Collect[torch.Tensor]) -> Stats: ...
"""


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # nan="propagate": asked for
@pytest.mark.parametrize("kind", ["Parallel", "Sequential"])
def test_one_non_finite_sample_among_good_ones(build: Callable[..., fd.Driver], kind: str) -> None:
    import torch

    dr = build(NAN.format(kind=kind))
    with pytest.raises(fd.SampleError, match=r"node 'feature' \(.*:10\) failed on sample 7 of group 'item' .*'feature' is not finite \(NaN or inf\), and reduction 'stats' folds it"):
        dr.execute(["stats"], inputs={"n": 20})
    report = fd.Report()
    stats = dr.execute(["stats"], inputs={"n": 20}, on_error="skip", report=report)["stats"]
    assert [s.index for s in report.skipped] == [7, 9]
    good = [i for i in range(20) if i not in (7, 9)]
    assert torch.isfinite(stats.mean).all() and float(stats.mean[0]) == pytest.approx(sum(good) / len(good))
    raw = dr.execute(["raw_stats"], inputs={"n": 20})["raw_stats"]  # asked for: NaN goes through
    assert bool(torch.isnan(raw.mean[1])) and bool(torch.isinf(raw.mean[0]))


def test_a_float_wav_with_a_nan_sample(tmp_path: Path) -> None:
    import soundfile as sf

    from flowdata.media import load_audio

    wave = np.zeros(1600, dtype=np.float32)
    wave[100] = np.nan
    path = tmp_path / "bad.wav"
    sf.write(path, wave, 16000, subtype="FLOAT")
    with pytest.raises(fd.MediaError, match=r"bad.wav: holds 1 sample\(s\) that are NaN or inf"):
        load_audio(path)


STUCK = """
import os
import signal
import time

from flowdata import Collect, Parallel, Sequential

def item(n: int) -> Parallel[int]:
    yield from range(n)

def stream(n: int) -> Sequential[int]:
    yield from range(n)

def slow(item: int, stuck: int = 3, deaf: int = -1) -> int:
    if item == stuck:
        if os.environ.get("FD_TEST_STUCK_MARK"):  # tells the test the sample is under way
            open(os.environ["FD_TEST_STUCK_MARK"], "w").close()
        time.sleep(3600)  # a read that never returns, a lock never released
    if item == deaf:  # a node no signal reaches (as native code holding the GIL)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        time.sleep(3600)
    return 2 * item

def swallows(item: int) -> int:
    try:
        if item == 1:
            time.sleep(3600)
    except Exception:
        return -1  # a value as if the sample had been computed
    return item

def streamed(stream: int) -> int:
    if stream == 2:
        time.sleep(3600)
    return stream

def slows(slow: Collect[int]) -> list[int]:
    return list(slow)

def swallowed(swallows: Collect[int]) -> list[int]:
    return list(swallows)

def streams(streamed: Collect[int]) -> list[int]:
    return list(streamed)

def scaled(item: int, slows: list[int]) -> int:
    return item + len(slows)
"""


@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_a_node_that_never_returns(build: Callable[..., fd.Driver], executor: str) -> None:
    dr = build(STUCK)
    with pytest.raises(fd.SampleError, match=r"node 'slow' \(.*:14\) failed on sample 3 of group 'item'.*SampleTimeout: timed out after 0.5 s"):
        dr.execute(["slows"], inputs={"n": 6}, timeout=0.5, executor=executor)
    report = fd.Report()
    out = dr.execute(["slows"], inputs={"n": 6}, timeout=0.5, executor=executor, on_error="skip", report=report)
    assert out["slows"] == [0, 2, 4, 8, 10]
    assert [(s.index, s.node, s.error) for s in report.skipped] == [(3, "slow", "SampleTimeout: timed out after 0.5 s")]


def test_a_node_that_does_not_respond_to_the_timeout(build: Callable[..., fd.Driver]) -> None:
    dr = build(STUCK)
    report = fd.Report()
    with fd.ProcessExecutor(2) as pool:
        out = dr.execute(["slows"], inputs={"n": 40, "deaf": 7}, timeout=0.5, chunk_size=4, executor=pool,
                         on_error="skip", report=report)
        assert out["slows"] == [2 * i for i in range(40) if i not in (3, 7)]  # every other chunk computed again
        assert {(s.index, s.error.split(",")[0]) for s in report.skipped} == {
            (3, "SampleTimeout: timed out after 0.5 s"), (7, "SampleTimeout: timed out after 0.5 s")}
        deaf = next(s for s in report.skipped if s.index == 7)
        assert "did not respond to the interruption: its worker process (pid" in deaf.error
        assert "was ended after" in deaf.error and "and replaced" in deaf.error
        # The replaced pool goes on serving later calls.
        assert dr.execute(["slows"], inputs={"n": 5, "stuck": -1}, executor=pool)["slows"] == [0, 2, 4, 6, 8]
        with pytest.raises(fd.SampleError, match=r"failed on sample 2 of group 'item'.*timed out after 0.5 s, and did not respond"):
            dr.execute(["slows"], inputs={"n": 8, "stuck": -1, "deaf": 2}, timeout=0.5, executor=pool)


def test_a_node_that_catches_every_exception_is_still_timed_out(build: Callable[..., fd.Driver]) -> None:
    report = fd.Report()
    out = build(STUCK).execute(["swallowed"], inputs={"n": 3}, timeout=0.3, on_error="skip", report=report)
    assert out["swallowed"] == [0, 2] and [s.index for s in report.skipped] == [1]


def test_a_sequential_node_that_never_returns(build: Callable[..., fd.Driver]) -> None:
    dr = build(STUCK)
    with pytest.raises(fd.SampleError, match=r"node 'streamed' .* failed on sample 2 of group 'stream'.*timed out after 0.3 s"):
        dr.execute(["streams"], inputs={"n": 4}, timeout=0.3)
    assert dr.execute(["streams"], inputs={"n": 4}, timeout=0.3, on_error="skip")["streams"] == [0, 1, 3]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_node_that_never_returns(build: Callable[..., fd.Driver], workers: int) -> None:
    dr = build(STUCK)
    loader = dr.dataloader(["slow"], inputs={"n": 8}, batch_size=2, num_workers=workers, timeout=0.5,
                           on_error="skip")
    assert [v for b in loader for v in b["slow"].tolist()] == [0, 2, 4, 8, 10, 12, 14]
    assert [(s.index, s.error) for s in loader.report.skipped] == [(3, "SampleTimeout: timed out after 0.5 s")]
    loader = dr.dataloader(["slow"], inputs={"n": 8}, batch_size=2, num_workers=workers, timeout=0.5)
    with pytest.raises(fd.SampleError, match=r"node 'slow' .* failed on sample 3 .*timed out after 0.5 s"):
        list(loader)


def test_a_loader_node_that_does_not_respond_to_the_timeout(build: Callable[..., fd.Driver]) -> None:
    loader = build(STUCK).dataloader(["slow"], inputs={"n": 8, "stuck": -1, "deaf": 5}, batch_size=2, num_workers=2,
                                     timeout=0.5, on_error="skip")
    with pytest.raises(fd.SampleError, match=r"node 'slow' .* failed on sample 5 of group 'item' .*SampleTimeout: timed out after 0.5 s, and did not respond to the interruption: its DataLoader worker \(pid \d+\) was ended after .* s, which ends the epoch\n    item: 5"):
        list(loader)


@pytest.mark.parametrize("timeout", [0, -1.0, "5", True])
def test_a_timeout_that_is_not_a_number_of_seconds(build: Callable[..., fd.Driver], timeout: Any) -> None:
    dr = build(STUCK)
    with pytest.raises(fd.InputError, match=r"timeout=.*: expected a positive number of seconds, or None for no limit"):
        dr.execute(["slows"], inputs={"n": 2}, timeout=timeout)
    with pytest.raises(fd.InputError, match=r"expected a positive number of seconds"):
        dr.dataloader(["slow"], inputs={"n": 2}, timeout=timeout)


INTERRUPTED = """
import signal, subprocess, sys
sys.path.insert(0, {folder!r})
import flowdata as fd
import {module}

dr = fd.Builder().with_modules({module}).build()
print("ready", flush=True)
try:
    {call}
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.parametrize("call", [
    "dr.execute(['slows'], inputs={'n': 8}, executor='processes')",
    "dr.execute(['slows'], inputs={'n': 8})",
    "dr.dataloader(['scaled'], inputs={'n': 8}, num_workers=2)",  # its statistics pass
    "list(dr.dataloader(['slow'], inputs={'n': 8}, num_workers=2))",
])
def test_ctrl_c_while_a_node_is_stuck(make_module: Callable[..., Any], tmp_path: Path, call: str) -> None:
    import signal
    import subprocess
    import sys
    import time

    module = make_module(STUCK)
    script = tmp_path / "run.py"
    script.write_text(INTERRUPTED.format(folder=str(tmp_path), module=module.__name__, call=call))
    mark = tmp_path / "stuck"
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            env={**os.environ, "FD_TEST_STUCK_MARK": str(mark)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        # Interrupt once a worker is stuck in sample 3 (however loaded the machine is,
        # starting the workers may take long), not after a fixed time.
        for _ in range(1200):
            if mark.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert mark.exists(), "sample 3 never started"
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGINT)
        # The pool used to wait for the stuck worker forever; stopping takes about 1.5 s
        # on a quiet machine, and the limit only tells a hang from a slow machine.
        out, err = proc.communicate(timeout=90)
        # Stopped and handled (a process that ends by SIGINT at its very end, after the
        # handler ran, is also what Ctrl-C means; it happens under load).
        assert out.strip() == "interrupted" and proc.returncode in (0, -signal.SIGINT), err[-3000:]
        # No worker left running: a worker still starting when the pool was ended sees
        # its parent gone and ends within a second.
        left = ["?"]
        for _ in range(50):
            left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
            if not left:
                break
            time.sleep(0.1)
        assert left == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


ODD_SHAPE = """
import numpy as np

from flowdata import Collect, Parallel, Sequential, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def stream(n: int) -> Sequential[int]:
    yield from range(n)

def frames(item: int, odd: int) -> np.ndarray:
    return np.full((2, 4 if item == odd else 3), float(item))

def streamed(stream: int, odd: int) -> np.ndarray:
    return np.full((2, 4 if stream == odd else 3), float(stream))

@reduce(Welford, dim=(0, 1))
def stats(frames: Collect[np.ndarray]) -> Stats: ...

@reduce(Welford, dim=(0, 1))
def stream_stats(streamed: Collect[np.ndarray]) -> Stats: ...
"""


@pytest.mark.parametrize(("output", "n", "odd", "executor"), [
    ("stats", 10, 5, "inline"),  # folded in this process (a first, partial block)
    ("stats", 300, 0, "inline"),  # the odd value first: the others are not to blame
    ("stats", 300, 200, "processes"),  # folded in a worker (a whole block)
    ("stream_stats", 300, 130, "inline"),  # a Sequential group: folded here, value by value
])
def test_a_value_of_the_wrong_shape_for_its_reduction(build: Callable[..., fd.Driver], output: str, n: int, odd: int,
                                                      executor: str) -> None:
    dr = build(ODD_SHAPE)
    reduction = "stats" if output == "stats" else "stream_stats"
    with pytest.raises(fd.SampleError, match=rf"node '{reduction}' \(.*\) failed on sample {odd} of group .*StatsError: Welford\(dim=\(0, 1\)\) expected values whose kept shape is \(3,\), got \(4,\)(.|\n)*    item: {odd}\n"):
        dr.execute([output], inputs={"n": n, "odd": odd}, executor=executor)
    report = fd.Report()
    stats = dr.execute([output], inputs={"n": n, "odd": odd}, executor=executor, on_error="skip", report=report)[output]
    kept = [i for i in range(n) if i != odd]
    assert stats.count.tolist() == [2 * len(kept)] * 3
    assert np.allclose(stats.mean.numpy(), np.mean(kept))
    assert [(s.index, s.node) for s in report.skipped] == [(odd, reduction)] and sum(report.seen.values()) == n


TERMINATED = """
import sys, time
sys.path.insert(0, {folder!r})
import flowdata as fd
import {module}

dr = fd.Builder().with_modules({module}).build()
loader = dr.dataloader(['slow'], inputs={{'n': 1000, 'stuck': -1}})  # an index in a scratch folder
pool = fd.ProcessExecutor(1)
dr.execute(['slows'], inputs={{'n': 4, 'stuck': -1}}, executor=pool)  # the pool's context folder
print("ready", flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_run_ended_by_a_signal_leaves_no_scratch_folder(make_module: Callable[..., Any], tmp_path: Path,
                                                          how: str) -> None:
    import signal
    import subprocess
    import sys

    module = make_module(STUCK)
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "run.py"
    script.write_text(TERMINATED.format(folder=str(tmp_path), module=module.__name__))
    env = {**os.environ, "TMPDIR": str(temp)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        kinds = sorted(p.name.split("-")[1] for p in temp.iterdir())
        assert kinds == ["context", "index"]
        proc.send_signal(getattr(signal, how))
        assert proc.wait(timeout=15) == -getattr(signal, how)  # ended by the signal, as without flowdata
    finally:
        proc.kill()
    # No clean-up runs on a signal (a Python SIGTERM handler would delay the end while the
    # main thread is in native code): the next run removes what it left.
    assert len(list(temp.iterdir())) == 2
    subprocess.run([sys.executable, "-c", "import flowdata.run.scratch as s; s.remove(s.make('watch'))"],
                   env=env, check=True)
    assert list(temp.iterdir()) == []


def test_a_large_jpeg_for_a_small_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image, JpegImagePlugin

    from flowdata_modules import image

    rng = np.random.default_rng(0)
    big = (np.kron(rng.integers(0, 255, (30, 40, 3)), np.ones((50, 50, 1))) + rng.normal(0, 4, (1500, 2000, 3)))
    Image.fromarray(big.clip(0, 255).astype(np.uint8)).save(tmp_path / "photo.jpg", quality=92)
    decoded: list[tuple[int, int]] = []
    load = JpegImagePlugin.JpegImageFile.load

    def recording(self: Any) -> Any:
        out = load(self)
        decoded.append(self.size)
        return out

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "load", recording)
    dr = fd.Builder().with_modules(image).build()
    row = {"path": str(tmp_path / "photo.jpg"), "label": "a"}
    fast = dr.run_sample(["resized"], item=row)["resized"]
    assert set(decoded) == {(250, 188)}  # 1/8 of each side still covers 32x32
    decoded.clear()
    full = dr.run_sample(["resized"], item=row, inputs={"jpeg_draft": False})["resized"]
    assert set(decoded) == {(2000, 1500)}
    assert fast.shape == full.shape == (3, 32, 32)
    assert float((fast - full).abs().mean()) < 0.02  # the same picture


def _load_as(uid: int | None, paths: list[tuple[str, str]], queue: Any) -> None:
    """In a forked child: drops to ``uid`` (root reads any file), then loads each file."""
    from flowdata.errors import MediaError
    from flowdata.media import load_audio, load_image

    if uid is not None:
        os.setgid(uid)
        os.setuid(uid)
    for kind, path in paths:
        try:
            (load_audio if kind == "audio" else load_image)(path)
            queue.put("loaded")
        except MediaError as err:
            queue.put(str(err))


def test_a_file_that_cannot_be_read_for_lack_of_permission(tmp_path: Path) -> None:
    import shutil
    import tempfile

    import soundfile as sf
    import torch  # noqa: F401  # everything the loaders import, imported before the child drops its rights
    from PIL import Image, PngImagePlugin  # noqa: F401

    import flowdata.media  # noqa: F401

    open_folder = Path(tempfile.mkdtemp())  # in the system's temporary folder: anyone may enter it
    closed = tmp_path / "closed"  # a folder nobody else may enter
    closed.mkdir(mode=0o700)
    wav, png, hidden = open_folder / "clip.wav", open_folder / "shape.png", closed / "clip.wav"
    for w in (wav, hidden):
        sf.write(w, np.zeros(800, dtype=np.float32), 8000)
    Image.new("RGB", (8, 8)).save(png)
    open_folder.chmod(0o755)
    for p in (wav, png):
        p.chmod(0o000)
    try:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        paths = [("audio", str(wav)), ("image", str(png)), ("audio", str(hidden))]
        # Root reads any file: the loaders run as 'nobody' there (as the files' owner elsewhere).
        child = ctx.Process(target=_load_as, args=(65534 if os.geteuid() == 0 else None, paths, queue))
        if os.geteuid() != 0:
            closed.chmod(0o000)
        child.start()
        out = [queue.get(timeout=60) for _ in paths]
        child.join(10)
    finally:
        closed.chmod(0o700)
        shutil.rmtree(open_folder)
    fix = "\n  fix: check the file's permissions and the disk"
    assert out[0] == f"{wav}: cannot be opened (permission denied){fix}"  # not "truncated or corrupt"
    assert out[1] == f"{png}: cannot be opened (permission denied){fix}"
    assert out[2] == (f"{hidden}: cannot be opened (permission denied: a folder on its path cannot be entered)\n"
                      "  fix: check the permissions of the folders that hold it")  # not "does not exist"
