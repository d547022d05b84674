"""Checkpoint I/O in one pass (issue 21): a save hashes each file from the bytes it writes,
a load hashes the bytes it loads from, and a resume verifies its checkpoint once.

- The hashing writer (trainer/checkpoint/durable.py) writes the very bytes
  safetensors.torch.save_file writes, for every dtype it lays out, in chunks small enough
  to slice tensors and to hash on the second thread; its digest and size are those of the
  file on disk.
- save_checkpoint's manifest records those digests without reading any file back, and the
  AdamW state is written from the optimizer's own tensors (no copy first).
- load_checkpoint reads and hashes each file once, into the process's own memory, and
  builds the weights and AdamW state over the very bytes it verified (read from the
  descriptors it opened): a file renamed over one of them after the verification is not
  loaded, and one truncated while it is read is refused, never a SIGBUS (issue 35).
- A resume from ``latest`` or from a path reads each of the checkpoint's files once.

Durability (fsync after the last write, before any rename) and the crash points are
tests/unit/trainer/test_checkpoint_crash_points.py's.

    .venv/bin/pytest -q tests/unit/trainer/test_checkpoint_io.py
"""

from __future__ import annotations

import concurrent.futures
import errno
import json
import os
import threading
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.direct_io import needs_direct_writes
from tests.unit.trainer.checkpoint_support import fresh, manifest_entry, save, trained
from tests.unit.trainer.test_components import train_state
from trainer.checkpoint import durable, load, manifest, optimizer_state, verify
from trainer.checkpoint.layout import DATA_FILES, MANIFEST_FILE, MODEL_FILE, OPTIMIZER_FILE
from trainer.train import checkpointing, loss


def _mixed() -> dict[str, torch.Tensor]:
    """One tensor of every dtype the writer lays out, a scalar, an empty one, a non-ASCII
    name and one larger than a chunk: the layout cases of safetensors' own writer."""
    g = torch.Generator().manual_seed(3)
    tensors = {
        f"t.{dtype}".replace("torch.", ""): (torch.randint(0, 100, (3, 5), generator=g)).to(dtype)
        for dtype in durable.DTYPE_NAMES
    }
    tensors |= {
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "größe": torch.randn(7, generator=g),
        "big": torch.randn(50_000, generator=g),
        "a.small": torch.randn(3, generator=g, dtype=torch.float64),
    }
    return tensors


@pytest.mark.parametrize("threaded", [True, False])
def test_the_hashing_writer_writes_save_file_s_bytes_and_hashes_exactly_them(
    tmp_path, monkeypatch, threaded
):
    monkeypatch.setattr(durable, "CHUNK_BYTES", 4096)  # "big" is sliced, smalls gathered
    monkeypatch.setattr(durable, "THREADED_BYTES", 0 if threaded else 10**12)
    monkeypatch.setattr(manifest, "RANGE_BYTES", 10_000)  # chunks straddle range boundaries
    tensors = _mixed()
    assert durable.writable_here(tensors)
    save_file(tensors, str(tmp_path / "reference"), metadata={"format": "pt"})
    entry = durable.write_tensors(tmp_path / "ours", tensors, {"format": "pt"}).entry()
    ours, reference = (tmp_path / "ours").read_bytes(), (tmp_path / "reference").read_bytes()
    assert ours == reference, "not the bytes safetensors.torch.save_file writes"
    assert entry == manifest_entry(ours, 10_000)
    assert len(entry["range_sha256"]) == -(-len(ours) // 10_000) > 10
    back = load_file(str(tmp_path / "ours"))
    assert sorted(back) == sorted(tensors)
    assert all(torch.equal(back[n], t) for n, t in tensors.items())


def test_a_full_disk_mid_file_is_the_error_a_direct_write_raises(tmp_path, monkeypatch):
    """ENOSPC on the third direct write surfaces as itself, not as an error of cleaning up
    after it: the failing write (a wrapper, as here, or the traceback) still holds a view of
    the aligned buffer when the writer closes, so the buffer cannot be unmapped then."""
    monkeypatch.setattr(durable, "DIRECT_BYTES", 0)
    monkeypatch.setattr(durable, "DIRECT_WRITE_BYTES", durable.DIRECT_ALIGN)
    needs_direct_writes(tmp_path)
    real_write, writes = os.write, []

    def filling(fd, data):
        writes.append(len(data))
        if len(writes) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(durable.os, "write", filling)
    try:
        durable.write_tensors(tmp_path / "ours", _mixed(), {"format": "pt"})
    except Exception as exc:  # which error it is, is the assertion
        raised = exc
    else:
        pytest.fail("a write that failed with ENOSPC returned")
    assert isinstance(raised, OSError) and raised.errno == errno.ENOSPC, repr(raised)


@pytest.mark.parametrize("how", ["direct", "buffered", "direct refused mid-file"])
def test_a_large_file_written_directly_holds_save_file_s_bytes(tmp_path, monkeypatch, how):
    """A tensor file of DIRECT_BYTES or more goes to the device directly (O_DIRECT) through
    an aligned buffer, its tail padded to a block and the file cut back to its size; a file
    system that refuses a direct write mid-file gets the rest buffered; below DIRECT_BYTES
    every write is buffered. The same bytes and entry every way. The buffer is made much
    smaller than the file (many flushes) and the file's size is no whole number of blocks."""
    monkeypatch.setattr(durable, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(durable, "DIRECT_WRITE_BYTES", 3 * durable.DIRECT_ALIGN)
    monkeypatch.setattr(durable, "DIRECT_BYTES", 10**12 if how == "buffered" else 0)
    if how != "buffered":
        needs_direct_writes(tmp_path)
    tensors = _mixed()
    save_file(tensors, str(tmp_path / "reference"), metadata={"format": "pt"})
    reference = (tmp_path / "reference").read_bytes()
    assert len(reference) > 10 * durable.DIRECT_WRITE_BYTES
    assert len(reference) % durable.DIRECT_ALIGN, "the tail must need padding"
    writes = {"direct": 0, "buffered": 0, "refused": 0}
    real_write = os.write

    def writing(fd, data):
        if durable.is_direct(fd):
            writes["direct"] += 1
            if how == "direct refused mid-file" and writes["direct"] == 4:
                writes["refused"] += 1
                raise OSError(errno.EINVAL, "Invalid argument")
        else:
            writes["buffered"] += 1
        return real_write(fd, data)

    monkeypatch.setattr(durable.os, "write", writing)
    try:
        entry = durable.write_tensors(tmp_path / "ours", tensors, {"format": "pt"}).entry()
    except OSError as exc:
        pytest.fail(f"the write failed ({how}): {exc!r}")
    monkeypatch.undo()
    assert (tmp_path / "ours").read_bytes() == reference, "not save_file's bytes"
    assert entry == manifest_entry(reference, manifest.RANGE_BYTES)
    if how == "direct":
        assert writes["direct"] > 10 and writes["buffered"] == 0, writes
    elif how == "buffered":
        assert writes["direct"] == 0 and writes["buffered"] > 10, writes
    else:
        assert writes["refused"] == 1 and writes["direct"] == 4 and writes["buffered"] > 5


def test_write_json_s_entry_is_the_file_s(tmp_path):
    entry = durable.write_json(tmp_path / "x.json", {"b": [1, 2.5, "é"], "a": None})
    data = (tmp_path / "x.json").read_bytes()
    assert entry == manifest_entry(data, manifest.RANGE_BYTES)
    assert json.loads(data) == {"a": None, "b": [1, 2.5, "é"]}


def test_a_save_hashes_while_writing_and_writes_the_adamw_state_from_its_own_memory(
    tmp_path, monkeypatch
):
    model, optimizer = trained(steps=2)
    tensors, _ = optimizer_state.optimizer_tensors(model, optimizer)
    own = {v.data_ptr() for s in optimizer.state.values() for v in s.values()}
    assert {t.data_ptr() for t in tensors.values()} <= own, "the AdamW state was copied"

    def no_read_back(path, *args, **kwargs):
        raise AssertionError(f"{path}: hashed by reading it back")

    monkeypatch.setattr(manifest, "file_entry", no_read_back)
    path = save(tmp_path, 4, model, optimizer)
    files = json.loads((path / MANIFEST_FILE).read_text())["files"]
    assert sorted(files) == sorted(DATA_FILES)
    for name, entry in files.items():
        data = (path / name).read_bytes()
        assert entry == manifest_entry(data, manifest.RANGE_BYTES), name
    assert verify.inspect_checkpoint(path).valid


def test_a_save_writes_the_next_file_while_the_last_one_is_still_hashed(tmp_path, monkeypatch):
    """The model file's range digests are held until the next file's writing starts: a save
    that waits for each file's digests before writing on would wait out the hold (and fail
    here)."""
    monkeypatch.setattr(durable, "THREADED_BYTES", 0)  # every tensor file hashed on threads
    next_file_started, waited, files_begun, held = threading.Event(), [], [], set()
    real_write, real_submit, real_sha256_of = (
        durable.write_hashed,
        durable._submit,
        durable.sha256_of,
    )

    def write_hashed(path, pieces):
        files_begun.append(path.name)
        if len(files_begun) > 1:
            next_file_started.set()
        return real_write(path, pieces)

    def submit(hashers, pieces):
        if len(files_begun) == 1:  # a range of the model file: the first a save writes
            held.add(id(pieces))
        return real_submit(hashers, pieces)

    def sha256_of(pieces):
        if id(pieces) in held and not next_file_started.wait(timeout=5):
            waited.append(True)
        return real_sha256_of(pieces)

    monkeypatch.setattr(durable, "write_hashed", write_hashed)
    monkeypatch.setattr(durable, "_submit", submit)
    monkeypatch.setattr(durable, "sha256_of", sha256_of)
    model, optimizer = trained(steps=2)
    path = save(tmp_path, 4, model, optimizer)
    assert files_begun[0] == MODEL_FILE and held, "the model file's ranges were not held"
    assert not waited, "the save waited for model.safetensors' digests before writing on"
    files = json.loads((path / MANIFEST_FILE).read_text())["files"]
    for name in DATA_FILES:
        data = (path / name).read_bytes()
        assert files[name] == manifest_entry(data, manifest.RANGE_BYTES), name


def _state_of(model, optimizer) -> list[torch.Tensor]:
    """Weights, then every parameter's AdamW state by key (copies)."""
    state = [optimizer.state[p] for p in model.parameters()]
    return [t.clone() for t in model.state_dict().values()] + [
        s[k].clone() for s in state for k in sorted(s)
    ]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _count_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = verify._read_hashed

    def counted(path, size, keep, range_bytes=None):
        reads.append(path.name)
        return real(path, size, keep, range_bytes)

    monkeypatch.setattr(verify, "_read_hashed", counted)
    return reads


def test_a_load_reads_each_file_once_and_loads_the_bytes_it_verified(tmp_path, monkeypatch):
    model, optimizer = trained(steps=2)
    expected = _state_of(model, optimizer)
    path = save(tmp_path, 4, model, optimizer)
    reads = _count_reads(monkeypatch)
    verified = load.verify_for_load(path, architecture=model.config)
    # Renamed over after the verification (same size): the load must not read it.
    for name in (MODEL_FILE, OPTIMIZER_FILE):
        damaged = bytearray((path / name).read_bytes())
        damaged[-64:] = b"\x7f" * 64
        (path / f"{name}.new").write_bytes(bytes(damaged))
        (path / f"{name}.new").replace(path / name)
    target, target_opt = fresh(seed=5)
    load.load_checkpoint(path, target, target_opt, verified=verified)
    assert _same(_state_of(target, target_opt), expected), "loaded bytes it had not verified"
    assert sorted(reads) == sorted(DATA_FILES), reads


def _mapped(path) -> bool:
    """Whether this process holds a memory mapping of ``path`` (Linux: /proc/self/maps)."""
    target = str(path.resolve())
    with open("/proc/self/maps", encoding="utf-8") as maps:
        return any(line.rstrip("\n").endswith(target) for line in maps)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
def test_the_loaded_adamw_state_is_the_memory_the_verification_read_the_file_into(tmp_path):
    """Issue 35: no mapping of the file (on its copy-on-write mapping the first step after a
    resume paid a fault for every page of the moments: seconds at 370M) and no copy after
    the verification (about 1 s at 370M, most of a fast disk's load beyond its raw read):
    the AdamW tensors are views of the bytes that were hashed, and writable in place."""
    model, optimizer = trained(steps=2)
    expected = _state_of(model, optimizer)
    path = save(tmp_path, 4, model, optimizer)
    target, target_opt = fresh(seed=5)
    verified = load.verify_for_load(path, architecture=model.config)
    kept = verified.contents(OPTIMIZER_FILE)
    assert kept is not None and kept.numel() == (path / OPTIMIZER_FILE).stat().st_size
    assert not _mapped(path / OPTIMIZER_FILE) and not _mapped(path / MODEL_FILE)
    start, end = kept.data_ptr(), kept.data_ptr() + kept.numel()
    load.load_checkpoint(path, target, target_opt, verified=verified)
    del verified, kept
    assert _same(_state_of(target, target_opt), expected)
    moments = [
        t for s in target_opt.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")
    ]
    assert moments and all(start <= t.data_ptr() < end for t in moments), "copied after verify"
    before = (path / OPTIMIZER_FILE).read_bytes()
    for t in moments:
        t.add_(1.0)  # an optimizer step's write: in place, never reaching the file
    assert (path / OPTIMIZER_FILE).read_bytes() == before
    assert not _mapped(path / OPTIMIZER_FILE)


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("version", ["ranges", "one stream"])
def test_a_file_truncated_while_it_is_verified_is_refused_by_its_size(
    tmp_path, monkeypatch, kept, version
):
    """Read with pread, not mapped: the file cut short under the reader is a short read and
    a verdict naming the file ("size changed ... while it was read"), never a SIGBUS."""
    model, optimizer = trained(steps=2)
    path = save(tmp_path, 4, model, optimizer)
    target = path / OPTIMIZER_FILE
    size = target.stat().st_size
    real_pread = os.preadv
    cut = []

    def truncating_pread(fd, buffers, offset, *args):
        if not cut and os.fstat(fd).st_ino == target.stat().st_ino:
            os.truncate(target, size // 2)
            cut.append(offset)
        return real_pread(fd, buffers, offset, *args)

    monkeypatch.setattr(verify.os, "preadv", truncating_pread)
    entry = manifest.read_manifest(path)["files"][OPTIMIZER_FILE]
    if version == "one stream":
        entry = {"size": size, "sha256": "0" * 64}
    verify._reading.keep, verify._reading.hashers = kept, None
    with concurrent.futures.ThreadPoolExecutor(2) as hashers:
        verify._reading.hashers = hashers
        verdict = verify._file_verdict(target, entry)
    verify._reading.keep, verify._reading.hashers = False, None
    assert cut, "the reader never read the file"
    assert not verdict.ok and verdict.contents is None
    assert verdict.reason == f"size changed to {size // 2} bytes while it was read"


@pytest.mark.parametrize("spec", ["latest", "path"])
def test_a_resume_verifies_its_checkpoint_once(tmp_path, monkeypatch, spec):
    saved = train_state()
    tokens = torch.randint(0, saved.model.config.vocab_size, (2, 9), generator=torch.Generator())
    loss.accumulate_gradients(saved.model, [loss.next_token_pairs(tokens)])
    saved.optimizer.step()
    path = checkpointing.Checkpointer(tmp_path, save_interval=1, keep=2).save(0, saved)
    assert path is not None
    expected = _state_of(saved.model, saved.optimizer)
    reads = _count_reads(monkeypatch)
    resumed = train_state()
    checkpointing.resume("latest" if spec == "latest" else path, tmp_path, resumed)
    assert _same(_state_of(resumed.model, resumed.optimizer), expected)
    assert sorted(reads) == sorted(DATA_FILES), f"files read to verify: {reads}"


def test_a_damaged_newer_checkpoint_is_skipped_and_its_bytes_are_not_kept(tmp_path):
    model, optimizer = trained(steps=2)
    older = save(tmp_path, 4, model, optimizer)
    newer = save(tmp_path, 8, model, optimizer)
    data = bytearray((newer / OPTIMIZER_FILE).read_bytes())
    data[-1] ^= 1
    (newer / OPTIMIZER_FILE).write_bytes(bytes(data))
    chosen, verified, skipped = load.latest_verified(tmp_path, architecture=model.config)
    assert chosen == older and [p for p, _ in skipped] == [newer]
    assert "sha256 differs" in skipped[0][1]
    assert verified is not None and verified.path == older
    assert all(verified.contents(n) is not None for n in load.LOADED)
    damaged = verify.inspect_checkpoint(newer, keep=load.LOADED)
    assert not damaged.valid and all(v.contents is None for v in damaged.files)


READ_FAULTS = ["direct", "buffered", "direct refused mid-file", "direct reads cut short"]


def _reads_as(monkeypatch, path, how: str, *, pause: float = 0.0) -> dict[str, int]:
    """verify's reads counted by kind (direct or buffered, told by the descriptor's flags:
    a closed direct descriptor's number is reused) with ``how``'s fault in the direct
    ones: none, no direct descriptor at all, every third refused (EINVAL), or each cut to
    one block; every read takes ``pause`` longer. Skips where ``path``'s file system has
    no direct reads and ``how`` needs them."""
    probe = os.open(path, os.O_RDONLY)
    direct = verify._open_direct(probe)
    os.close(probe)
    if direct is None and how != "buffered":
        pytest.skip(f"{path}: no direct reads on this file system")
    if direct is not None:
        os.close(direct)
    real_open, real_pread = verify._open_direct, os.preadv
    reads = {"direct": 0, "refused": 0, "buffered": 0}

    def opening(fd):
        return None if how == "buffered" else real_open(fd)

    def reading(fd, buffers, offset, *args):
        time.sleep(pause)
        if durable.is_direct(fd):
            reads["direct"] += 1
            if how == "direct refused mid-file" and reads["direct"] % 3 == 0:
                reads["refused"] += 1
                raise OSError(errno.EINVAL, "Invalid argument")
            (view,) = buffers
            if how == "direct reads cut short" and len(view) > 4096:
                reads["refused"] += 1
                return real_pread(fd, [memoryview(view)[:4096]], offset, *args)
        else:
            reads["buffered"] += 1
        return real_pread(fd, buffers, offset, *args)

    monkeypatch.setattr(verify, "_open_direct", opening)
    monkeypatch.setattr(verify.os, "preadv", reading)
    return reads


def _read_as_asked(reads: dict[str, int], how: str) -> None:
    if how == "buffered":
        assert reads["direct"] == 0 and reads["buffered"] > 0
    else:
        assert reads["direct"] > 10, f"the files were not read directly: {reads}"
    if how.startswith("direct "):
        assert reads["refused"] > 0


@pytest.mark.parametrize("how", READ_FAULTS)
def test_a_kept_file_holds_exactly_its_bytes_however_it_was_read(tmp_path, monkeypatch, how):
    """A load's files are read into own memory by several readers in pieces, directly from
    the device where the file system allows it (O_DIRECT), buffered otherwise or where a
    direct read is refused or returns less; ranges hashed as their pieces arrive (every
    read is slowed, so a range hashed before its last piece is in would be caught). Pieces,
    ranges and the direct block are made not to line up (a range ends mid-piece, the file
    mid-block)."""
    monkeypatch.setattr(manifest, "RANGE_BYTES", 5 * 4096 + 1000)
    monkeypatch.setattr(manifest, "MIN_RANGE_BYTES", 4096)
    monkeypatch.setattr(verify, "READ_PIECE", 2 * 4096)
    model, optimizer = trained(steps=2)
    path = save(tmp_path, 4, model, optimizer)
    reads = _reads_as(monkeypatch, path / OPTIMIZER_FILE, how, pause=0.002)
    verified = load.verify_for_load(path, architecture=model.config)
    assert verified.valid, verified.problems
    for name in load.LOADED:
        kept = verified.contents(name)
        assert kept is not None and bytes(kept.numpy()) == (path / name).read_bytes(), name
    _read_as_asked(reads, how)


def test_a_damaged_byte_is_refused_naming_its_range_when_read_directly(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "RANGE_BYTES", 5 * 4096 + 1000)
    monkeypatch.setattr(manifest, "MIN_RANGE_BYTES", 4096)
    monkeypatch.setattr(verify, "READ_PIECE", 2 * 4096)
    model, optimizer = trained(steps=2)
    path = save(tmp_path, 4, model, optimizer)
    data = bytearray((path / OPTIMIZER_FILE).read_bytes())
    data[7 * 4096 + 3] ^= 1  # in the second range, the fourth piece
    (path / OPTIMIZER_FILE).write_bytes(bytes(data))
    report = verify.inspect_checkpoint(path, keep=load.LOADED)
    size, width = len(data), 5 * 4096 + 1000
    assert not report.valid and all(v.contents is None for v in report.files)
    assert report.problems == [
        f"{path / OPTIMIZER_FILE}: sha256 differs from the manifest in bytes {width}-"
        f"{2 * width} (range 2 of {-(-size // width)})"
    ]


@pytest.mark.parametrize("how", READ_FAULTS)
def test_a_checked_file_is_hashed_from_its_bytes_however_it_was_read(tmp_path, monkeypatch, how):
    """A file checked but not kept (inspect, retention) is read range by range directly
    from the device where the file system allows it (several pieces at once), buffered
    otherwise or where a direct read is refused or returns less: the undamaged checkpoint
    verifies, and a flipped byte is refused naming its range, every way. Ranges are whole
    blocks here (so they can be read directly); the file ends mid-block."""
    monkeypatch.setattr(manifest, "RANGE_BYTES", 6 * 4096)
    monkeypatch.setattr(manifest, "MIN_RANGE_BYTES", 4096)
    monkeypatch.setattr(verify, "READ_PIECE", 2 * 4096)
    model, optimizer = trained(steps=2)
    path = save(tmp_path, 4, model, optimizer)
    reads = _reads_as(monkeypatch, path / OPTIMIZER_FILE, how)
    report = verify.inspect_checkpoint(path)
    assert report.valid, report.problems
    _read_as_asked(reads, how)
    data = bytearray((path / OPTIMIZER_FILE).read_bytes())
    assert len(data) % 4096 and len(data) > 4 * 6 * 4096
    data[13 * 4096 + 5] ^= 1  # in the third range, its second piece
    (path / OPTIMIZER_FILE).write_bytes(bytes(data))
    damaged = verify.inspect_checkpoint(path)
    width = 6 * 4096
    assert damaged.problems == [
        f"{path / OPTIMIZER_FILE}: sha256 differs from the manifest in bytes {2 * width}-"
        f"{3 * width} (range 3 of {-(-len(data) // width)})"
    ]


def test_verifying_small_files_takes_buffers_no_larger_than_the_files(tmp_path, monkeypatch):
    """Each file not kept is read through reused buffers: for a small file, buffers of its
    size. Ranges of 64 MiB each (a 64 MiB zero-filled buffer a file) made every save's
    retention check of a tiny run's checkpoints allocate and fill a gigabyte: a
    resumed run in the SIGKILL test went from 27 s to more than 300."""
    model, optimizer = trained(steps=2)
    path = save(tmp_path, 4, model, optimizer)
    made: list[int] = []
    real = verify._SpareBuffers

    class Recorded(real):
        def __init__(self, size, count):
            made.append(size)
            super().__init__(size, count)

    monkeypatch.setattr(verify, "_SpareBuffers", Recorded)
    assert verify.inspect_checkpoint(path).valid
    sizes = {p.name: p.stat().st_size for p in path.iterdir()}
    assert made and max(made) <= max(sizes.values()), (made, sizes)
