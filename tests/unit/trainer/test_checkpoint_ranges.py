"""Checkpoint format 3 (issue 35): every file's manifest entry lists the sha256 of each range
of it and nothing else; the save hashes the ranges on every core while it writes, and a load
verifies them on every core, so the hashing keeps up with a disk that is faster than one
core's sha256. Every byte is still covered: a flipped byte in any range, a truncated file, a
manifest whose ranges do not add up are refused, naming the file (and the range); format 2
(ranges and whole-file sha256) and format 1 (whole-file sha256 only) checkpoints are still
verified and loaded.

Ranges are made small here (100,000 bytes) so the tiny model's files span several."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import sys
import threading
import types
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.trainer.checkpoint_support import (
    as_format_1,
    as_format_2,
    listed_digest,
    manifest_entry,
    save,
    trained,
)
from trainer.checkpoint import durable, load, manifest, verify
from trainer.checkpoint.layout import (
    DATA_FILES,
    MANIFEST_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    CheckpointError,
)

RANGE = 100_000


@pytest.fixture
def small_ranges(monkeypatch):
    monkeypatch.setattr(manifest, "RANGE_BYTES", RANGE)
    monkeypatch.setattr(manifest, "MIN_RANGE_BYTES", RANGE)


@pytest.fixture
def checkpoint(tmp_path, small_ranges) -> Path:
    model, optimizer = trained(steps=2)
    return save(tmp_path / "run", 2, model, optimizer)


def _copy(checkpoint: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(checkpoint, tmp_path / name / checkpoint.name))


def _manifest(path: Path) -> dict:
    return json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))


def test_a_save_lists_the_sha256_of_every_range_of_the_bytes_on_disk(checkpoint):
    data = _manifest(checkpoint)
    assert data["format_version"] == 3
    assert sorted(data["files"]) == sorted(DATA_FILES)
    for name, entry in data["files"].items():
        assert entry == manifest_entry((checkpoint / name).read_bytes(), RANGE), name
    assert len(data["files"][OPTIMIZER_FILE]["range_sha256"]) == 13  # 1,271,036 bytes
    assert verify.inspect_checkpoint(checkpoint).valid


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("name", [MODEL_FILE, OPTIMIZER_FILE])
def test_a_byte_flipped_in_any_range_is_refused_naming_the_file_and_the_range(
    checkpoint, tmp_path, name, where
):
    path = _copy(checkpoint, tmp_path, "damaged")
    data = bytearray((path / name).read_bytes())
    ranges = -(-len(data) // RANGE)
    index = {"first": 0, "middle": ranges // 2, "last": ranges - 1}[where]
    offset = min(index * RANGE + 4321, len(data) - 1)
    data[offset] ^= 0x10
    (path / name).write_bytes(bytes(data))
    report = verify.inspect_checkpoint(path)
    start, end = index * RANGE, min(index * RANGE + RANGE, len(data))
    assert report.problems == [
        f"{path / name}: sha256 differs from the manifest in bytes {start}-{end} "
        f"(range {index + 1} of {ranges})"
    ]
    with pytest.raises(CheckpointError, match="sha256 differs from the manifest in bytes"):
        load.verify_for_load(path)


def test_a_truncated_file_is_refused_by_its_size(checkpoint, tmp_path):
    path = _copy(checkpoint, tmp_path, "truncated")
    data = (path / OPTIMIZER_FILE).read_bytes()
    (path / OPTIMIZER_FILE).write_bytes(data[: len(data) - RANGE])  # whole ranges gone
    assert verify.inspect_checkpoint(path).problems == [
        f"{path / OPTIMIZER_FILE}: size {len(data) - RANGE} bytes, the manifest says {len(data)}"
    ]


def _with_entry(path: Path, change) -> None:
    data = _manifest(path)
    change(data, data["files"][OPTIMIZER_FILE])
    (path / MANIFEST_FILE).write_text(json.dumps(data), encoding="utf-8")


MANIFEST_DAMAGE = {
    "a range digest missing": (
        lambda m, e: e["range_sha256"].pop(),
        "12 range digests, but 1271036 bytes in ranges of 100000 make 13",
    ),
    "a range digest too many": (
        lambda m, e: e["range_sha256"].append("0" * 64),
        "14 range digests",
    ),
    "a digest that is no sha256": (
        lambda m, e: e["range_sha256"].__setitem__(3, "xyz"),
        "range_sha256 is not a list of sha256 hex digests",
    ),
    "ranges smaller than the least": (
        lambda m, e: e.update(range_bytes=RANGE - 1),
        f"range_bytes is {RANGE - 1}, not a whole number of at least {RANGE}",
    ),
    "range_bytes a boolean": (
        lambda m, e: e.update(range_bytes=True),
        "range_bytes is true",
    ),
    "no ranges at all in format 3": (
        lambda m, e: (e.pop("range_bytes"), e.pop("range_sha256")),
        "has keys ['size'], a format 3 entry has ['range_bytes', 'range_sha256', 'size']",
    ),
    "a whole-file sha256 nothing verifies, in format 3": (
        lambda m, e: e.update(sha256="0" * 64),
        "has keys ['range_bytes', 'range_sha256', 'sha256', 'size']",
    ),
    "no ranges at all in format 2": (
        lambda m, e: (
            m.update(format_version=2),
            e.update(sha256="0" * 64),
            e.pop("range_bytes"),
            e.pop("range_sha256"),
        ),
        "range_bytes is null",
    ),
    "no whole-file sha256 in format 2": (
        lambda m, e: m.update(format_version=2),
        'not {"sha256": "<hex>", "size": <bytes>, ...}',
    ),
    "a format this trainer never wrote": (
        lambda m, e: m.update(format_version=4),
        "version 4; this trainer reads 'shipgate-checkpoint' versions 1, 2 and 3",
    ),
}


@pytest.mark.parametrize("damage", list(MANIFEST_DAMAGE))
def test_a_manifest_whose_ranges_do_not_add_up_is_refused_naming_the_entry(
    checkpoint, tmp_path, damage
):
    path = _copy(checkpoint, tmp_path, "manifest")
    change, says = MANIFEST_DAMAGE[damage]
    _with_entry(path, change)
    report = verify.inspect_checkpoint(path)
    assert not report.valid
    (problem,) = report.problems
    assert problem.startswith(f"{path / MANIFEST_FILE}: ") and says in problem, problem
    if "never wrote" not in damage:
        assert repr(OPTIMIZER_FILE) in problem


def test_the_undamaged_copy_of_each_case_is_valid(checkpoint, tmp_path):
    """The other side of the refusals above: rewriting the manifest unchanged is valid."""
    path = _copy(checkpoint, tmp_path, "unchanged")
    _with_entry(path, lambda m, e: None)
    assert verify.inspect_checkpoint(path).valid


def test_a_format_1_checkpoint_is_verified_by_its_whole_file_sha256(checkpoint, tmp_path):
    path = _copy(checkpoint, tmp_path, "v1")
    as_format_1(path)
    assert _manifest(path)["format_version"] == 1
    report = verify.inspect_checkpoint(path)
    assert report.valid, report.problems
    optimizer = next(v for v in report.files if v.name == OPTIMIZER_FILE)
    assert optimizer.sha256 == hashlib.sha256((path / OPTIMIZER_FILE).read_bytes()).hexdigest()
    data = bytearray((path / OPTIMIZER_FILE).read_bytes())
    data[-1] ^= 0x01
    (path / OPTIMIZER_FILE).write_bytes(bytes(data))
    assert verify.inspect_checkpoint(path).problems == [
        f"{path / OPTIMIZER_FILE}: sha256 differs from the manifest"
    ]


def test_a_format_2_checkpoint_is_verified_by_its_ranges(checkpoint, tmp_path):
    path = _copy(checkpoint, tmp_path, "v2")
    as_format_2(path)
    assert _manifest(path)["format_version"] == 2
    report = verify.inspect_checkpoint(path)
    assert report.valid, report.problems
    data = bytearray((path / MODEL_FILE).read_bytes())
    data[RANGE + 1] ^= 0x01
    (path / MODEL_FILE).write_bytes(bytes(data))
    assert verify.inspect_checkpoint(path).problems == [
        f"{path / MODEL_FILE}: sha256 differs from the manifest in bytes {RANGE}-{2 * RANGE} "
        f"(range 2 of {-(-len(data) // RANGE)})"
    ]


def _lonely_sha256(barrier: threading.Barrier, alone: list[int]):
    """hashlib.sha256 that first waits for a second caller: one that finds none (the barrier
    times out) is counted in ``alone``."""

    def sha256(data=b""):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            alone.append(len(data))
            barrier.reset()
        return hashlib.sha256(data)

    return sha256


def test_a_save_hashes_the_ranges_of_one_file_on_several_threads_at_once(
    tmp_path, monkeypatch, small_ranges
):
    """Two ranges of one file hashed together while it is written: a save that hashes a file
    as one stream (one core, as a whole-file digest must) waits out the barrier and fails."""
    barrier, alone = threading.Barrier(2, timeout=5), []
    monkeypatch.setattr(
        manifest, "hashlib", types.SimpleNamespace(sha256=_lonely_sha256(barrier, alone))
    )
    monkeypatch.setattr(durable, "HASHERS", 2)
    monkeypatch.setattr(durable, "THREADED_BYTES", 0)
    data = bytes(range(256)) * 2000  # 512,000 bytes: 6 ranges
    entry = durable.write_hashed(tmp_path / "file", [data[:8], data[8:]]).entry()
    assert entry == manifest_entry(data, RANGE)
    assert len(alone) <= 1, f"{len(alone)} ranges were hashed with no other one in flight"


def test_the_ranges_of_one_file_are_hashed_on_several_threads_at_once(tmp_path, monkeypatch):
    """Two ranges of one file in flight together: a loader that hashes a file's ranges one
    after another (one core, as format 1 must) waits out the barrier and fails here."""
    path = tmp_path / "file"
    path.write_bytes(bytes(range(256)) * 2000)  # 512,000 bytes: 6 ranges
    barrier, alone = threading.Barrier(2, timeout=5), []
    monkeypatch.setattr(
        verify, "hashlib", types.SimpleNamespace(sha256=_lonely_sha256(barrier, alone))
    )
    monkeypatch.setattr(verify, "HASHERS", 2)
    entry = manifest_entry(path.read_bytes(), RANGE)
    assert verify._verdicts(tmp_path, {"file": entry}, ["file"], keep=()) == [
        verify.FileVerdict("file", True, "ok", len(path.read_bytes()), None)
    ]
    assert len(alone) <= 1, f"{len(alone)} ranges were hashed with no other one in flight"


def test_a_file_entry_reads_only_a_regular_file(tmp_path):
    """A FIFO where a checkpoint file should be would hang a reader forever: refused at once."""
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        manifest.file_entry(fifo)


def test_a_run_store_s_digest_is_sha256sum_s_where_an_entry_has_it_else_the_ranges(
    checkpoint, tmp_path
):
    """content_digest: format 1 and 2 entries keep the whole file's sha256 (what sha256sum
    prints); a format 3 entry's is the sha256 of its range list, so it changes with any range."""
    entry = _manifest(checkpoint)["files"][OPTIMIZER_FILE]
    assert manifest.content_digest(entry) == listed_digest(entry)
    other = dict(entry, range_sha256=[*entry["range_sha256"][:-1], "0" * 64])
    assert manifest.content_digest(other) != manifest.content_digest(entry)
    path = _copy(checkpoint, tmp_path, "v2")
    as_format_2(path)
    whole = hashlib.sha256((path / OPTIMIZER_FILE).read_bytes()).hexdigest()
    assert manifest.content_digest(_manifest(path)["files"][OPTIMIZER_FILE]) == whole


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux thread's nice value")
def test_a_save_s_hashing_threads_run_behind_its_writer(tmp_path, monkeypatch, small_ranges):
    """The writer, not the hashing, is the save's critical path: every thread that hashes a
    range runs at a lower priority (a higher nice value) than the thread that writes."""
    monkeypatch.setattr(durable, "THREADED_BYTES", 0)
    writer = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    hashed_at, real = [], durable.sha256_of

    def sha256_of(pieces):
        hashed_at.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return real(pieces)

    monkeypatch.setattr(durable, "sha256_of", sha256_of)
    data = bytes(range(256)) * 2000  # 6 ranges
    assert durable.write_hashed(tmp_path / "file", [data]).entry() == manifest_entry(data, RANGE)
    assert len(hashed_at) == 6 and min(hashed_at) > writer, (writer, hashed_at)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == writer


def _oracle_ranges(data: bytes, range_bytes: int) -> list[bytes]:
    return [data[i : i + range_bytes] for i in range(0, len(data), range_bytes)] or [b""]


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@given(
    data=st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=8),
    range_bytes=st.integers(1, 64),
)
def test_however_a_file_arrives_in_chunks_its_ranges_are_the_same(data, cuts, range_bytes):
    """The one splitter (manifest.pieces_by_range): whatever the chunks, and whether a
    chunk ends inside a range, on its edge or spans several, the save's ranges (cut_into_ranges)
    and an entry's digests are those of the file cut every range_bytes (an empty file: one
    empty range), and the chunks pass through unchanged."""
    chunks = _chunked(data, cuts)
    ranges = _oracle_ranges(data, range_bytes)
    cut = list(manifest.cut_into_ranges(chunks, range_bytes))
    assert b"".join(bytes(chunk) for chunk, _ in cut) == data
    assert [b"".join(r) for _, done in cut for r in done] == ranges
    entry = manifest._entry_of_chunks(chunks, range_bytes)
    assert entry == manifest.entry_of(len(data), range_bytes, [
        hashlib.sha256(r).hexdigest() for r in ranges
    ])  # fmt: skip


def test_an_entry_hashes_each_chunk_as_it_comes_and_holds_no_range(tmp_path):
    """file_entry reads a file chunk by chunk: holding a range's chunks until the range is
    complete cost up to a range (64 MiB) of memory per file. Each chunk is overwritten once the
    next is asked for, so a digest computed later would be of the overwritten bytes."""
    data = os.urandom(10_000)
    buffers: list[bytearray] = []

    def reused_chunks():
        for start in range(0, len(data), 999):
            if buffers:
                buffers[-1][:] = bytes(len(buffers[-1]))  # the reader's buffer, reused
            buffers.append(bytearray(data[start : start + 999]))
            yield buffers[-1]

    entry = manifest._entry_of_chunks(reused_chunks(), 4096)
    assert entry["range_sha256"] == [
        hashlib.sha256(r).hexdigest() for r in _oracle_ranges(data, 4096)
    ]
