"""tools/bench_checkpoint.py measures what it says: ratios and verdicts come from the measured
seconds, reads start from a cold page cache (or the run stops), a load that restores nothing
stops the run, and a tiny end-to-end run writes complete, JSON-clean evidence and leaves no
scratch behind.

No speed is asserted (measure, don't assert speed in tests): a 2 MB tiny-preset checkpoint
says nothing about the 370M one, only that the benchmark runs."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import mmap
import os
import resource
import statistics
import sys
import threading
from pathlib import Path

import pytest
import torch

from tests.direct_io import needs_direct_writes
from tools import bench_checkpoint as bench
from trainer.checkpoint import durable, load
from trainer.model.config import preset

SECONDS = ("save_s", "raw_write_s", "load_s", "raw_read_s")


def _repeats(**series: list[float]) -> list[dict[str, float]]:
    """One dict a round, keyed by the series' names: _repeats(save_s=[1, 2], ...)."""
    return [dict(zip(series, values, strict=True)) for values in zip(*series.values(), strict=True)]


def test_summarize_takes_medians_and_ratios_of_the_measured_seconds():
    rounds = _repeats(
        save_s=[2.0, 4.0, 3.0],  # median 3.0
        raw_write_s=[2.5, 2.0, 2.2],  # median 2.2 -> save at 2.2 / 3.0 = 73 % of raw: missed
        load_s=[1.0, 1.2, 1.1],  # median 1.1
        raw_read_s=[0.9, 0.99, 0.95],  # median 0.95 -> load at 86 % of raw: met
    )
    result = bench.summarize(rounds, nbytes=1000)
    assert result["median_s"] == {
        "save_s": 3.0,
        "raw_write_s": 2.2,
        "load_s": 1.1,
        "raw_read_s": 0.95,
    }
    bw = result["bandwidth_bytes_per_s"]
    assert bw == pytest.approx(
        {"save": 1000 / 3.0, "raw_write": 1000 / 2.2, "load": 1000 / 1.1, "raw_read": 1000 / 0.95}
    )
    assert result["ratio"] == pytest.approx({"save": 2.2 / 3.0, "load": 0.95 / 1.1})
    assert result["target_ratio"] == 0.80
    assert result["target_met"] == {"save": False, "load": True}
    assert result["paired_ratio"]["save"] == pytest.approx([2.5 / 2.0, 2.0 / 4.0, 2.2 / 3.0])
    assert result["paired_ratio_median"]["save"] == pytest.approx(2.2 / 3.0)
    # Rounds 0 and 2 ran the checkpoint first, round 1 the raw side.
    by_order = result["paired_ratio_median_by_order"]
    assert by_order["checkpoint first"]["save"] == pytest.approx((2.5 / 2.0 + 2.2 / 3.0) / 2)
    assert by_order["raw first"]["save"] == pytest.approx(2.0 / 4.0)
    assert result["relative_spread"]["save"] == pytest.approx((4.0 - 2.0) / 3.0)
    assert result["paired_ratio_geomean"]["save"] == pytest.approx(
        (2.5 / 2.0 * 2.0 / 4.0 * 2.2 / 3.0) ** (1 / 3)
    )
    # First slots: the checkpoint in rounds 0 and 2 (save median 2.5, load 1.05), the raw
    # side in round 1 (write 2.0, read 0.99).
    assert result["first_slot_ratio"] == pytest.approx({"save": 2.0 / 2.5, "load": 0.99 / 1.05})


def test_first_slot_ratios_need_both_orders():
    rounds = _repeats(save_s=[1.0], raw_write_s=[0.9], load_s=[1.0], raw_read_s=[0.9])
    assert bench.summarize(rounds, nbytes=4096)["first_slot_ratio"] is None


@pytest.mark.parametrize(
    ("raw_s", "met"),
    [(0.8, True), (0.79, False)],  # 80 % exactly meets the target; a hair under misses
)
def test_the_verdict_turns_at_the_target(raw_s, met):
    rounds = _repeats(save_s=[1.0], raw_write_s=[raw_s], load_s=[1.0], raw_read_s=[raw_s])
    result = bench.summarize(rounds, nbytes=4096)
    assert result["target_met"] == {"save": met, "load": met}


def test_a_clock_that_did_not_advance_is_refused():
    rounds = _repeats(save_s=[0.0], raw_write_s=[1.0], load_s=[1.0], raw_read_s=[1.0])
    with pytest.raises(bench.BenchmarkError, match="clock did not advance"):
        bench.summarize(rounds, nbytes=10)


def test_eviction_takes_a_file_just_written_out_of_the_page_cache(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 16384)  # 4 MiB, written through the page cache
    path.read_bytes()
    assert bench.resident_fraction([path]) > 0.9  # mincore sees the cached pages ...
    left = bench.cold([path], drop_caches=False)
    assert left <= bench.MAX_RESIDENT  # ... and their absence after eviction
    assert bench.resident_fraction([path]) == left


@pytest.mark.parametrize("io", ["buffered", "direct", "direct, then buffered"])
def test_the_raw_file_holds_the_source_bytes_in_order_at_the_exact_size(tmp_path, monkeypatch, io):
    """Small files are written buffered; with DIRECT_BYTES lowered, directly (O_DIRECT where
    the file system takes it: the tail padded, then cut), or directly until the file system
    refuses a write mid-file. Read back buffered into a small buffer, and directly into an
    aligned one: every byte counted either way, and each side reports the way it took."""
    if io != "buffered":
        needs_direct_writes(tmp_path)
        monkeypatch.setattr(durable, "DIRECT_BYTES", 0)
        monkeypatch.setattr(durable, "DIRECT_WRITE_BYTES", durable.DIRECT_ALIGN)
    if io == "direct, then buffered":
        real_write, direct_writes = os.write, []

        def refusing_the_second(fd, data):
            if durable.is_direct(fd):
                direct_writes.append(len(data))
                if len(direct_writes) == 2:
                    raise OSError(errno.EINVAL, "Invalid argument")
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", refusing_the_second)
    sources = [memoryview(b"abcdefg"), memoryview(b""), memoryview(b"XYZ")]
    path = tmp_path / "raw.bin"
    size = 23 if io == "buffered" else 3 * durable.DIRECT_ALIGN + 23
    seconds, wrote = bench.raw_write(path, size, sources, chunk_bytes=4)
    assert seconds > 0 and wrote == io
    data = path.read_bytes()  # cycled, cut at ``size`` bytes
    assert data == (b"abcdefgXYZ" * (size // 10 + 1))[:size]
    buffer = bytearray(5) if io == "buffered" else mmap.mmap(-1, durable.DIRECT_ALIGN)
    read_s, got, read = bench.raw_read(path, buffer)
    assert got == size and read_s > 0
    assert read == ("buffered" if io == "buffered" else "direct")


def test_the_raw_side_is_reported_as_each_round_did_it():
    same = [{"raw_write_io": "direct", "raw_read_io": "direct"}] * 3
    assert bench.raw_io(same) == {"write": "direct", "read": "direct"}
    mixed = [
        {"raw_write_io": "direct", "raw_read_io": "direct"},
        {"raw_write_io": "direct, then buffered", "raw_read_io": "direct"},
        {"raw_write_io": "direct", "raw_read_io": "buffered"},
    ]
    assert bench.raw_io(mixed) == {
        "write": "direct | direct, then buffered",
        "read": "direct | buffered",
    }


def test_the_raw_source_is_the_checkpoints_tensor_bytes():
    model, optimizer = bench.trained_one_step(preset("tiny"), seed=0)
    sources = bench.tensor_bytes(model, optimizer)
    params = sum(p.numel() for p in model.parameters())
    # fp32 weights + exp_avg + exp_avg_sq, and one fp32 step count per parameter tensor.
    n_tensors = len(list(model.parameters()))
    assert sum(len(s) for s in sources) == 3 * 4 * params + 4 * n_tensors
    embed = model.state_dict()["model.embed_tokens.weight"]
    assert bytes(sources[0]) == embed.numpy().tobytes()


def _tiny_bench(tmp_path: Path) -> tuple[bench._Bench, Path]:
    model, optimizer = bench.trained_one_step(preset("tiny"), seed=0)
    b = bench._Bench(
        model=model,
        optimizer=optimizer,
        state=bench._training_state("tiny"),
        expected=bench.fingerprint(model, optimizer),
        write_chunk=64 * 1024,
        read_buffer=bytearray(64 * 1024),
        drop_caches=False,
    )
    return b, bench.measure_save(b, tmp_path / "run")["checkpoint"]


@pytest.mark.parametrize("side", ["load", "raw read"])
def test_a_read_that_would_come_from_ram_stops_the_run(tmp_path, monkeypatch, side):
    b, checkpoint = _tiny_bench(tmp_path)
    raw_file = tmp_path / "raw.bin"
    bench.raw_write(raw_file, 100_000, bench.tensor_bytes(b.model, b.optimizer), b.write_chunk)
    for path in [raw_file, *bench.checkpoint_files(checkpoint.parent)]:
        path.read_bytes()  # cached now
    monkeypatch.setattr(bench, "evict", lambda paths, drop_caches: None)  # forgets to evict
    with pytest.raises(bench.BenchmarkError, match="still in the page cache"):
        if side == "load":
            bench.measure_load(b, checkpoint)
        else:
            bench.measure_raw_read(b, raw_file, 100_000)


def test_a_load_that_restores_nothing_stops_the_run(tmp_path, monkeypatch):
    b, checkpoint = _tiny_bench(tmp_path)
    # A loader that verifies the files but never restores them into the model/optimizer.
    monkeypatch.setattr(load, "load_checkpoint", lambda path, *_: load.verify_checkpoint(path))
    with pytest.raises(bench.BenchmarkError, match="did not restore"):
        bench.measure_load(b, checkpoint)
    assert bench.fingerprint(b.model, b.optimizer) != b.expected  # zeroed, not restored


def test_a_load_restores_exactly_what_was_saved(tmp_path):
    b, checkpoint = _tiny_bench(tmp_path)
    measured = bench.measure_load(b, checkpoint)
    assert bench.fingerprint(b.model, b.optimizer) == b.expected
    assert 0 < measured["load_hash_s"] < measured["load_s"]  # verification is inside the load


def test_the_first_touch_writes_every_page_and_changes_no_value(tmp_path):
    """A read touch maps a cached page and copies nothing, so it missed the copy-on-write
    of every AdamW page that the first optimizer step after a resume pays."""
    b, checkpoint = _tiny_bench(tmp_path)
    bench.measure_load(b, checkpoint)
    tensors = [*b.model.parameters(), *bench._state_tensors(b.model, b.optimizer)]
    with torch.no_grad():  # values a plain rewrite could change (-0.0 + 0 is +0.0), at
        tensors[0].view(-1)[0] = -0.0  # the elements the touch writes: each page's first
        tensors[1].view(-1)[0] = float("nan")
    before = [t._version for t in tensors]
    snapshot = [t.detach().clone() for t in tensors]
    bench.first_touch_s(b.model, b.optimizer)
    written = [t._version > v for t, v in zip(tensors, before, strict=True)]
    assert all(written), f"{written.count(False)} of {len(written)} tensors were not written"
    for t, old in zip(tensors, snapshot, strict=True):
        bits = t.detach().reshape(-1).view(torch.uint8)
        assert torch.equal(bits, old.reshape(-1).view(torch.uint8)), "a bit changed"


def _positive_finite(value: object) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_a_resume_restores_the_saved_state_into_a_model_built_afresh(tmp_path):
    b, checkpoint = _tiny_bench(tmp_path)
    resumed = bench.time_a_resume(checkpoint, "tiny")
    assert resumed["fingerprint"] == b.expected
    assert resumed["load_s"] > 0 and 0 <= resumed["system_s"] <= resumed["cpu_s"]


@pytest.mark.parametrize("child", ["restores other values", "fails"])
def test_a_resume_that_restores_other_values_or_fails_stops_the_run(tmp_path, monkeypatch, child):
    b, checkpoint = _tiny_bench(tmp_path)
    wrong = {"load_s": 1.0, "cpu_s": 1.0, "system_s": 0.5, "fingerprint": [0.0]}
    script = (
        f"print({json.dumps(json.dumps(wrong))})"
        if child == "restores other values"
        else "import sys; sys.exit('no checkpoint here')"
    )
    monkeypatch.setattr(bench, "_resume_command", lambda *_: [sys.executable, "-c", script])
    expected = "did not restore the saved" if child == "restores other values" else "no checkpoint"
    with pytest.raises(bench.BenchmarkError, match=expected):
        bench.resumes_in_fresh_processes(b, checkpoint, "tiny")


def test_tiny_run_end_to_end_writes_complete_evidence(tmp_path):
    out = tmp_path / "evidence" / "bench.json"
    scratch = tmp_path / "scratch"
    argv = ["--preset", "tiny", "--repeats", "2", "--dir", str(scratch), "--no-drop-caches"]
    assert bench.main([*argv, "--read-chunk-kib", "256", "--out", str(out)]) == 0
    result = json.loads(out.read_text())  # NaN/inf would not have been written
    assert list(scratch.iterdir()) == []  # checkpoints and raw files cleaned up

    workload = result["workload"]
    files = workload["checkpoint_files"]
    assert workload["checkpoint_bytes"] == sum(files.values())
    params = workload["parameters"]
    assert params == 158_016
    # AdamW state really is there: exp_avg and exp_avg_sq of every fp32 parameter.
    assert files["step-00000001/optimizer.safetensors"] > 2 * 4 * params
    assert files["step-00000001/model.safetensors"] > 4 * params
    assert workload["roundtrip_exact"] is True
    assert workload["sha256_included"] == {"save": True, "load": True}
    assert isinstance(workload["filesystem"]["throttled_bytes_per_s"], dict)

    rounds = result["repeats"]
    assert [r["order"] for r in rounds] == ["checkpoint first", "raw first"]
    for r in rounds:
        assert all(_positive_finite(r[k]) for k in SECONDS), r
        for side in ("save", "load"):  # this process's CPU: every thread, the kernel's part
            assert 0 <= r[f"{side}_system_s"] <= r[f"{side}_cpu_s"] < 10, r
        assert r["bytes"] == workload["checkpoint_bytes"]
        assert 0 < r["save_hash_s"] < r["save_s"] and 0 < r["load_hash_s"] < r["load_s"]
        assert 0 < r["save_optimizer_copy_s"] < r["save_s"]
        assert r["load_resident_before"] <= bench.MAX_RESIDENT
        assert r["raw_read_resident_before"] <= bench.MAX_RESIDENT
        assert _positive_finite(r["load_first_touch_s"])
        assert isinstance(r["optimizer_state_file_mapped"], bool)
        assert r["raw_write_io"] in ("direct", "buffered", "direct, then buffered")
        assert r["raw_read_io"] in ("direct", "buffered")
    assert workload["raw_io"] == bench.raw_io(rounds)

    # CPU seconds are counted (tiny work: one clock tick may round a side's to zero).
    assert sum(r["save_cpu_s"] + r["load_cpu_s"] for r in rounds) > 0

    # The summary is the per-repeat seconds, not numbers from elsewhere.
    medians = {k: statistics.median(r[k] for r in rounds) for k in SECONDS}
    assert result["median_s"] == pytest.approx(medians)
    assert result["ratio"]["save"] == pytest.approx(medians["raw_write_s"] / medians["save_s"])
    assert result["ratio"]["load"] == pytest.approx(medians["raw_read_s"] / medians["load_s"])
    assert result["target_met"] == {k: v >= 0.80 for k, v in result["ratio"].items()}
    assert result["bandwidth_bytes_per_s"]["raw_read"] == pytest.approx(
        workload["checkpoint_bytes"] / medians["raw_read_s"]
    )

    touch = result["load_first_touch"]
    with_touch = statistics.median(r["load_s"] + r["load_first_touch_s"] for r in rounds)
    assert touch["ratio_load_plus_first_touch"] == pytest.approx(medians["raw_read_s"] / with_touch)

    bound = result["bound"]  # each side named by the higher of its disk and CPU floors
    assert bound["disk_read_s"] == pytest.approx(medians["raw_read_s"])
    assert bound["disk_write_s"] == pytest.approx(medians["raw_write_s"])
    assert bound["cores"] == len(result["machine"]["cpu_affinity"])
    for key in ("one_stream_s", "ranges_one_thread_s", "ranges_all_cores_s"):
        assert _positive_finite(bound[key]), key
    for side, disk in (("load", "disk_read_s"), ("save", "disk_write_s")):
        cpu = statistics.median(r[f"{side}_cpu_s"] for r in rounds)
        assert bound[f"{side}_cpu_s"]["total"] == pytest.approx(cpu)
        assert bound[f"{side}_cpu_floor_s"] == pytest.approx(cpu / bound["cores"])
        assert bound[side] == ("disk" if bound[disk] >= bound[f"{side}_cpu_floor_s"] else "CPU")
    for side, disk, digests in (
        ("load_format_1", "disk_read_s", "one_stream_s"),
        ("save_format_2", "disk_write_s", "format_2_save_digests_s"),
    ):
        assert bound[side] == ("disk" if bound[disk] >= bound[digests] else "hashing (CPU)")

    resume = result["resume"]  # loads in fresh processes, as a resume makes them
    assert len(resume["runs"]) == bench.RESUMES
    assert all(_positive_finite(r["load_s"]) for r in resume["runs"])
    assert resume["load_s_median"] == statistics.median(r["load_s"] for r in resume["runs"])
    assert resume["ratio_to_raw_read"] == pytest.approx(
        medians["raw_read_s"] / resume["load_s_median"]
    )

    warm_up = result["warm_up"]  # paid before the rounds, in neither side's times
    assert _positive_finite(warm_up["write_s"]) and warm_up["counted"] is False
    assert warm_up["io"] in ("direct", "buffered", "direct, then buffered")
    assert warm_up["bytes"] == pytest.approx(workload["checkpoint_bytes"], rel=0.05)

    eviction = result["cache_eviction"]
    assert eviction["drop_caches"] == "disabled (--no-drop-caches)"
    assert eviction["max_resident_fraction_seen"] <= bench.MAX_RESIDENT
    assert result["command"].startswith("python tools/bench_checkpoint.py --preset tiny")
    assert len(result["git"]["commit"]) == 40
    assert result["machine"]["cpu_count"] >= 1


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        bench.run_benchmark("tiny", repeats=0, directory=tmp_path)
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        bench.run_benchmark("huge", repeats=1, directory=tmp_path)


def test_spending_counts_the_user_and_kernel_seconds_of_every_thread():
    """Hashing on another thread (user time) and faulting in fresh memory (kernel time):
    the block's CPU seconds are both, the system part the kernel's alone."""

    def hashing() -> None:
        hashlib.sha256(bytes(64 << 20)).digest()

    before = resource.getrusage(resource.RUSAGE_SELF)
    with bench.spending() as spent:
        worker = threading.Thread(target=hashing)
        worker.start()
        fresh = mmap.mmap(-1, 256 << 20)
        fresh[:: mmap.PAGESIZE] = b"\1" * (len(fresh) // mmap.PAGESIZE)  # fault every page in
        worker.join()
    after = resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    assert spent.system > 0.005, "no kernel time counted for 65,536 page faults"
    assert spent.system == pytest.approx(system, abs=0.01)
    assert spent.cpu == pytest.approx(user + system, abs=0.01)
    assert spent.cpu - spent.system > 0.02, "no user time counted for 64 MiB of sha256"
    assert spent.seconds > 0


HASHING = {
    "one_stream_s": 3.5,
    "ranges_one_thread_s": 3.0,
    "ranges_all_cores_s": 1.6,
    "format_2_save_digests_s": 6.5,
}


def test_each_side_is_bound_by_the_higher_of_its_disk_and_cpu_floors():
    """The CPU floor is the side's own CPU seconds over the cores, hashing or not: a load
    that hashes in 1.6 s on two cores but spends 5 more core-seconds in the kernel (fresh
    memory) is bound by the CPU, not by a disk that reads in 2.2 s - what the rule that
    counted the hashing alone called it. A save whose CPU fits under its disk time is the
    disk's."""
    rounds = _repeats(
        raw_read_s=[2.2, 2.2, 2.3],
        raw_write_s=[5.0, 4.8, 4.9],
        load_s=[3.9, 3.8, 4.0],
        load_cpu_s=[8.0, 7.6, 8.4],
        load_system_s=[4.5, 4.3, 4.8],
        save_s=[4.9, 5.0, 4.8],
        save_cpu_s=[3.4, 3.6, 3.5],
        save_system_s=[0.2, 0.3, 0.2],
    )
    bound = bench.bounds(rounds, HASHING, cores=2)
    assert (bound["disk_read_s"], bound["disk_write_s"]) == (2.2, 4.9)  # medians
    assert (bound["load"], bound["save"]) == ("CPU", "disk")
    assert bound["load_cpu_floor_s"] == pytest.approx(8.0 / 2)
    assert bound["load_cpu_s"] == pytest.approx(
        {"total": 8.0, "hashing": 3.0, "system": 4.5, "other": 8.0 - 4.5 - 3.0}
    )
    assert bound["load_beyond_floor_s"] == pytest.approx(3.9 - 4.0)
    assert bound["save_cpu_floor_s"] == pytest.approx(3.5 / 2)
    assert bound["save_beyond_floor_s"] == pytest.approx(4.9 - 4.9)
    # By hashing alone, as formats 1 and 2 were bound: one stream 3.5 s > 2.2 s of disk.
    assert (bound["load_format_1"], bound["save_format_2"]) == ("hashing (CPU)", "hashing (CPU)")


@pytest.mark.parametrize("cores, expected", [(1, "CPU"), (2, "disk"), (4, "disk")])
def test_the_cpu_floor_is_spread_over_the_cores_the_run_may_use(cores, expected):
    rounds = _repeats(
        raw_read_s=[2.0], raw_write_s=[2.0], load_s=[2.1], load_cpu_s=[3.0],
        load_system_s=[0.5], save_s=[2.1], save_cpu_s=[3.0], save_system_s=[0.5],
    )  # fmt: skip
    bound = bench.bounds(rounds, HASHING, cores=cores)
    assert (bound["load"], bound["save"]) == (expected, expected)
    assert bound["load_cpu_floor_s"] == pytest.approx(3.0 / cores)


def _cgroup_tree(tmp_path: Path, cgroup: str, files: dict[str, str]) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_cgroup_v1_throttle_on_the_measured_device_is_recorded(tmp_path):
    group = "sys/fs/cgroup/blkio/fastdisk"
    root = _cgroup_tree(
        tmp_path,
        "8:pids:/\n7:blkio:/fastdisk\n4:memory:/elsewhere\n0::/\n",
        {
            f"{group}/blkio.throttle.read_bps_device": "8:0 5\n7:0 2000000000\n",
            f"{group}/blkio.throttle.write_bps_device": "7:0 1000000000\n",
        },
    )
    assert bench.bandwidth_limits(7, 0, root) == {"read": 2_000_000_000, "write": 1_000_000_000}
    assert bench.bandwidth_limits(8, 0, root) == {"read": 5}  # another device's own limit
    assert bench.bandwidth_limits(7, 1, root) == {}


def test_a_cgroup_v2_io_max_on_the_measured_device_is_recorded(tmp_path):
    root = _cgroup_tree(
        tmp_path,
        "0::/bench\n",
        {"sys/fs/cgroup/bench/io.max": "7:0 rbps=3000000000 wbps=max riops=max wiops=max\n"},
    )
    assert bench.bandwidth_limits(7, 0, root) == {"read": 3_000_000_000}
    assert bench.bandwidth_limits(259, 0, root) == {}
    assert bench.bandwidth_limits(7, 0, tmp_path / "no-proc") == {}
