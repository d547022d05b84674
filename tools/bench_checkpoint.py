"""Benchmark checkpoint save and load against the same disk's raw sequential write and read,
side by side in one run; write the numbers as JSON (issue 7: a full 370M checkpoint, weights
+ AdamW state, saves and loads at >= 80 % of the disk's raw sequential bandwidth).

    python tools/bench_checkpoint.py --out evidence/benchmarks/checkpoint-io-370m-cpu.json
    python tools/bench_checkpoint.py --preset tiny --repeats 1 --no-drop-caches  # seconds

"save" is trainer.checkpoint.save.save_checkpoint as the trainer calls it, on the preset's
model and a torch AdamW (trainer.train.optim.build_adamw) after one real optimizer step, so
optimizer.safetensors holds exp_avg and exp_avg_sq of every parameter. Its time includes
every write, every fsync and the digests of every file for manifest.json: since issue 21 the
files are written from the tensors' own memory (no copy of the AdamW state) and hashed
while written (since format 3, each range's sha256 once, on every core), so
``save_hash_s`` (build_manifest) and ``save_optimizer_copy_s``
(optimizer_tensors) are what is left of those two steps, near zero.
"load" is trainer.checkpoint.load.load_checkpoint into the same model and optimizer (zeroed
first, so a load that restores nothing is caught): it verifies the size, sha256 and contents
of every file before restoring anything, as a resume does, then restores weights, AdamW state
and RNGs. The verification (``load_hash_s``) is the load's one read of the files: in
parallel, each read into the process's own memory (directly from the device, O_DIRECT,
where the file system allows it) and each range hashed there on every core as it arrives;
the tensors are then built over those same bytes and the weights copied into the model
(issue 35: until 2026-11-30 the files were hashed
over private mappings and the AdamW state then copied into own memory, about 1 s at 370M;
until 2026-11-28 it stayed on the mapping: the loader returned sooner, and the first
optimizer step after a resume paid a copy-on-write fault for every page, 7-8 s for the
370M on the development VM, which a read touch did not show). Whatever a load leaves for
the first step is measured right after each load by writing one element of every page
(``load_first_touch_s``), reported beside load_s and added to it in
``load_plus_first_touch``. The rounds load in one process, which takes back memory it has
just freed; ``resume`` times RESUMES loads each in a new process that built the model and an
AdamW with no state, as a resume does, and reports them apart (not in the ratios).
"raw" is one file of exactly the checkpoint's byte count in the same directory, holding
the same weight and AdamW bytes (a storage layer that compresses or deduplicates treats both
sides alike): written in order and fsynced, then read back with sequential readinto() calls
of ``--read-chunk-kib`` into one aligned buffer. Both go directly to the device (O_DIRECT)
where the file system allows it (``raw_io`` says which, as each round's raw write and
read reported it off its descriptor), as a save's large files and a load's reads do since
2026-11-30: through the page cache, the raw side would be the slower one (4.4 GB written
and fsynced on the development VM: 10.6 s buffered, 1.4 s direct), not the disk's
bandwidth. The raw write goes through the save's own file writer
(durable.file_writer) with none of a save's work. It is the ceiling the checkpoint is held
to, so its chunk sizes are the faster ones measured on the development VM (interleaved runs,
median MiB/s): buffered writes 1 MiB 1445 vs 64 MiB 642 (64 MiB writes were erratic there,
330-1670), reads 64 MiB 1382 vs 16 MiB 1274 vs 1 MiB 1154.
What bounds each side (``bound``, bounds()): the disk (the raw twin's time) or the CPU (the
side's own CPU seconds over the cores it may run on), split into hashing, the kernel and the
rest. A load makes the whole checkpoint fresh memory of its own, and a raw read does not: on
2-core VMs the kernel's part (faulting in and zeroing 4.5 GB) was as large as the hashing,
and larger the less memory was free (the development VM hands free memory back to its
host, which faults it in again on first touch: 1.8 kernel core-seconds a 370M load with
most of its 23 GB free, 5-8 with 10 GB held by a tmpfs). So a RAM-backed loop device is no
stand-in for a fast disk there: it takes the very memory the load needs (``filesystem``
names a loop device's backing file system and any cgroup bandwidth limit on the device, so
such a run says what it measured).

Fairness:
- Every read (raw and load) starts from a cold page cache: each file to be read is fsynced
  and dropped with posix_fadvise(POSIX_FADV_DONTNEED); ``sync; echo 1 >
  /proc/sys/vm/drop_caches`` follows where permitted (--no-drop-caches turns it off). Then
  mincore(2) counts the files' pages still resident; above 1 % the run stops, because a
  read served from RAM is not the disk's bandwidth. (A hypervisor's own cache under a
  virtual disk is out of reach of both; it would serve raw and checkpoint alike.)
- Every write starts after os.sync(), so no earlier write-back is still pending.
- One raw write of the checkpoint's size, deleted and not counted, comes before the rounds
  (``warm_up``): on the development VM the first such write in a process took 8.3-8.5 s and
  the next 2.8-2.9 s, whichever side went first, and round 0 always puts the save first.
- Each side writes its files, reads them back and deletes them before the other side
  starts, so every write lands on the space the side before it freed: on the development
  VM (ext4 mounted with online discard) a 4 GB write took 2.5-2.7 s right after a
  deletion of the same size and 6-12 s when it followed other writes, whatever the idle
  time between (issue 35's 78 % save ratio had the checkpoint's save follow the raw write
  in odd rounds, or the raw write follow the save in even ones).
- Repeats pair each checkpoint measurement with its raw twin right next to it (save with
  raw write, load with raw read); the checkpoint goes first in even rounds, raw in odd ones,
  so drift hits both; medians are reported, paired ratios beside them, also by order, with
  two statistics the order within a pair does not bias: the geometric mean of the paired
  ratios (the order effect cancels in it) and the first-slot ratio (each side timed only
  in the rounds where it went first). The default of 8 repeats gives each side the first
  slot equally often (an odd count would hand the more frequent slot to one side): on the
  development VM the time of a 4.5 GB write depended 2-4x on what had run just before it
  (whichever side went second in a pair paid for the first's write-back), and quiet
  4-repeat runs read save 64-84 % and load 68-83 % of raw (the 64 % with issue 21's first
  writer, the rest with today's).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import hashlib
import json
import mmap
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import safetensors
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gates.provenance.evidence import portable_path  # noqa: E402 - needs ROOT on sys.path
from trainer.checkpoint import durable, load, manifest, optimizer_state, save, verify  # noqa: E402
from trainer.checkpoint.layout import OPTIMIZER_FILE  # noqa: E402
from trainer.checkpoint.state import TrainingState, config_hash  # noqa: E402
from trainer.model.config import LlamaConfig, preset  # noqa: E402
from trainer.model.llama import Llama, build_model  # noqa: E402
from trainer.train import loss, optim  # noqa: E402

BANDWIDTH_TARGET = 0.80  # issue 7: save and load each >= 80 % of raw sequential bandwidth
MAX_RESIDENT = 0.01  # a "cold" read may find at most this fraction of its pages cached
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
MODEL_SEED = 0
#: Fresh processes that each resume from the checkpoint once (resumes_in_fresh_processes).
RESUMES = 2
STEP = 1  # the checkpoint's step: one optimizer step has been taken
MIB = 1024 * 1024


class BenchmarkError(RuntimeError):
    """The run cannot produce a meaningful number; the message says which and why."""


# ---------------------------------------------------------------- page cache


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return libc


def resident_pages(path: Path) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages of ``path``), from mincore(2).

    Python's mmap module has no mincore, so the file is mapped through libc; mapping and
    asking fault nothing in.
    """
    size = path.stat().st_size
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    if pages == 0:
        return 0, 0
    libc = _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"{path}: mmap for mincore failed")
        try:
            vec = ctypes.create_string_buffer(pages)
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"{path}: mincore failed")
            return sum(b & 1 for b in vec.raw), pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident_fraction(paths: list[Path]) -> float:
    """The share of the pages of ``paths`` that are in the page cache."""
    counts = [resident_pages(p) for p in paths]
    total = sum(n for _, n in counts)
    if total == 0:
        raise BenchmarkError(f"no bytes to read in {[str(p) for p in paths]}")
    return sum(r for r, _ in counts) / total


def drop_caches_status(enabled: bool) -> str:
    """Whether drop_caches will be written: "used", or why not (tried once here)."""
    if not enabled:
        return "disabled (--no-drop-caches)"
    try:
        os.sync()
        DROP_CACHES.write_text("1\n")
    except OSError as exc:
        return f"not permitted ({exc.strerror or exc})"
    return "used"


def evict(paths: list[Path], *, drop_caches: bool) -> None:
    """Drop ``paths`` from the page cache: fsync + POSIX_FADV_DONTNEED, then drop_caches."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if drop_caches:
        os.sync()
        DROP_CACHES.write_text("1\n")  # page cache only (1), not dentries and inodes


def cold(paths: list[Path], *, drop_caches: bool) -> float:
    """Evict ``paths``, check they are out of the cache; returns the resident fraction left."""
    evict(paths, drop_caches=drop_caches)
    left = resident_fraction(paths)
    if left > MAX_RESIDENT:
        raise BenchmarkError(
            f"{left:.1%} of the pages of {[p.name for p in paths]} are still in the page cache "
            f"after eviction (at most {MAX_RESIDENT:.0%} allowed): a read would measure RAM, "
            "not the disk"
        )
    return left


# ---------------------------------------------------------------- raw I/O


def tensor_bytes(model: Llama, optimizer: torch.optim.Optimizer) -> list[memoryview]:
    """The bytes of every weight and AdamW state tensor: the raw writer's source.

    The raw file holds the same numbers as the checkpoint, so a storage layer that
    compresses or deduplicates treats both sides alike. Built per write and dropped after:
    a load replaces the AdamW tensors, and a view kept alive would pin the old ones.
    """
    tensors = [*model.state_dict().values(), *_state_tensors(model, optimizer)]
    return [
        memoryview(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy())
        for t in tensors
        if t.numel()
    ]


def _pieces(sources: list[memoryview], nbytes: int, chunk_bytes: int) -> Iterator[memoryview]:
    """``nbytes`` of ``sources`` in order (from the start again if they run out), in pieces
    of at most ``chunk_bytes``."""
    if sum(len(s) for s in sources) == 0:
        raise BenchmarkError("no source bytes to write")
    left = nbytes
    while left:
        for source in sources:
            for start in range(0, len(source), chunk_bytes):
                piece = source[start : start + min(chunk_bytes, left)]
                yield piece
                left -= len(piece)
                if not left:
                    return


def raw_write(
    path: Path, nbytes: int, sources: list[memoryview], chunk_bytes: int
) -> tuple[float, str]:
    """(seconds, how) to write ``nbytes`` of ``sources`` to a new ``path`` sequentially and
    fsync it, through the checkpoint's file writer (durable.file_writer: directly where the
    file system takes O_DIRECT, as a save's large files are) with none of a save's work.
    ``how`` is what this write did, read off its descriptor: "direct", "buffered", or
    "direct, then buffered" when the file system refused a direct write mid-file."""
    os.sync()
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    writer = durable.file_writer(fd, nbytes)
    began_direct = durable.is_direct(fd)
    try:
        for piece in _pieces(sources, nbytes, chunk_bytes):
            writer.write(piece)
        writer.finish()
        os.fsync(fd)
        ended_direct = durable.is_direct(fd)
    finally:
        writer.close()
        os.close(fd)
    seconds = time.perf_counter() - started
    if began_direct and not ended_direct:
        return seconds, "direct, then buffered"
    return seconds, "direct" if began_direct else "buffered"


def raw_read(path: Path, buffer: mmap.mmap | bytearray) -> tuple[float, int, str]:
    """(seconds, bytes, how) to read ``path`` sequentially into ``buffer``, chunk by chunk;
    directly from the device, as a load reads, where the file system allows it and the
    buffer is a mapping (page-aligned) of whole blocks. ``how``: "direct" or "buffered",
    what this read did."""
    view = memoryview(buffer)
    total = 0
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        direct = (
            isinstance(buffer, mmap.mmap)
            and len(buffer) % durable.DIRECT_ALIGN == 0
            and durable.set_direct(fh.fileno(), on=True)  # refused (no O_DIRECT): buffered
        )
        while n := fh.readinto(view):
            total += n
    return time.perf_counter() - started, total, "direct" if direct else "buffered"


def raw_io(rounds: list[dict[str, Any]]) -> dict[str, str]:
    """How the raw side reached the disk, as each round's write and read reported it: one
    word per side when every round did the same, else every distinct way, in order."""
    return {
        side: " | ".join(dict.fromkeys(r[f"raw_{side}_io"] for r in rounds))
        for side in ("write", "read")
    }


# ---------------------------------------------------------------- the checkpoint side


@contextlib.contextmanager
def timed_calls(owner: object, name: str, seconds: list[float]) -> Iterator[None]:
    """While open, every call of ``owner.name`` appends its duration to ``seconds``.

    Splits the hashing out of a save or load without changing what either does.
    """
    original: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, original)


def trained_one_step(cfg: LlamaConfig, *, seed: int) -> tuple[Llama, torch.optim.AdamW]:
    """The model and AdamW after one real optimizer step on a tiny batch: full AdamW state."""
    model = build_model(cfg, seed=seed)
    optimizer = _adamw(model)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (1, 9), generator=generator)
    loss.accumulate_gradients(model, [loss.next_token_pairs(tokens)])
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    missing = [n for n, p in model.named_parameters() if set(optimizer.state[p]) != _ADAMW_STATE]
    if missing:
        raise BenchmarkError(f"AdamW state not populated for {missing[:3]} ({len(missing)})")
    return model, optimizer


_ADAMW_STATE = {"step", "exp_avg", "exp_avg_sq"}


def _adamw(model: Llama) -> torch.optim.AdamW:
    """The benchmark's AdamW (no state until a step or a load)."""
    return optim.build_adamw(model, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def fingerprint(model: Llama, optimizer: torch.optim.Optimizer) -> list[float]:
    """Float64 sums of every weight and AdamW state tensor: equal after an exact round trip."""
    with torch.no_grad():
        sums = [float(p.double().sum()) for p in model.parameters()]
        for p in model.parameters():
            sums.extend(float(optimizer.state[p][k].double().sum()) for k in sorted(_ADAMW_STATE))
    return sums


def zero_everything(model: Llama, optimizer: torch.optim.Optimizer) -> None:
    """Overwrite weights and AdamW state, so only a real load can bring the values back."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
            for value in optimizer.state[p].values():
                value.zero_()


def checkpoint_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file())


@dataclasses.dataclass
class _Spent:
    """Wall seconds and this process's CPU seconds (every thread; ``system``: the kernel's
    part - page faults, copies, I/O set-up) of the work in a ``spending()`` block."""

    seconds: float = 0.0
    cpu: float = 0.0
    system: float = 0.0


@contextlib.contextmanager
def spending() -> Iterator[_Spent]:
    spent = _Spent()
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    try:
        yield spent
    finally:
        after = resource.getrusage(resource.RUSAGE_SELF)
        spent.seconds = time.perf_counter() - started
        spent.system = after.ru_stime - before.ru_stime
        spent.cpu = after.ru_utime - before.ru_utime + spent.system


def timed_save(
    run_dir: Path, model: Llama, optimizer: torch.optim.Optimizer, state: TrainingState
) -> dict[str, Any]:
    hashing: list[float] = []
    copying: list[float] = []
    os.sync()
    with (
        timed_calls(save, "build_manifest", hashing),
        timed_calls(optimizer_state, "optimizer_tensors", copying),
        spending() as spent,
    ):
        path = save.save_checkpoint(
            run_dir, step=state.step, model=model, optimizer=optimizer, state=state
        )
    return {
        "path": path,
        "seconds": spent.seconds,
        "cpu_s": spent.cpu,
        "system_s": spent.system,
        "hash_s": _one(hashing, "save.build_manifest"),
        "optimizer_copy_s": _one(copying, "optimizer_state.optimizer_tensors"),
    }


def timed_load(path: Path, model: Llama, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    hashing: list[float] = []
    with timed_calls(load, "verify_checkpoint", hashing), spending() as spent:
        load.load_checkpoint(path, model, optimizer)
    return {
        "seconds": spent.seconds,
        "cpu_s": spent.cpu,
        "system_s": spent.system,
        "hash_s": _one(hashing, "load.verify_checkpoint"),
    }


def first_touch_s(model: Llama, optimizer: torch.optim.Optimizer) -> float:
    """Seconds to write one element of every page of every weight and AdamW state tensor.

    What a load leaves for the first optimizer step after a resume, which writes every
    moment in place: until 2026-11-28 the loader handed back the AdamW tensors on a private
    (copy-on-write) mapping of optimizer.safetensors, and that step copied every page. A
    read touch (what this measured until then) maps the cached page and copies nothing, so
    it showed 0.03 s where the first step paid 7-8 s on the development VM. ``mul_(1)``
    rewrites each element unchanged (-0.0 and NaN included); the fingerprint after proves it.
    """
    started = time.perf_counter()
    with torch.no_grad():
        for t in [*model.parameters(), *_state_tensors(model, optimizer)]:
            flat = t.detach().reshape(-1)
            if flat.numel():
                flat[:: max(1, mmap.PAGESIZE // t.element_size())].mul_(1)
    return time.perf_counter() - started


def _state_tensors(model: Llama, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for p in model.parameters() for v in optimizer.state[p].values()]


def mapped_into_process(path: Path) -> bool:
    """Whether this process holds a memory mapping of ``path`` (/proc/self/maps)."""
    target = str(path.resolve())
    with open("/proc/self/maps", encoding="utf-8") as fh:
        return any(line.rstrip("\n").endswith(target) for line in fh)


def _one(seconds: list[float], what: str) -> float:
    if len(seconds) != 1:
        raise BenchmarkError(f"{what} ran {len(seconds)} times in one call; expected once")
    return seconds[0]


# ---------------------------------------------------------------- summary


def bandwidth(nbytes: int, seconds: float) -> float:
    """Bytes per second; a clock that did not advance is an error, not infinity."""
    if seconds <= 0:
        raise BenchmarkError(f"{nbytes} bytes in {seconds} s: the clock did not advance")
    return nbytes / seconds


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


#: Which side of a pair goes first: round ``i`` runs ORDERS[i % 2] (run_round).
ORDERS = ("checkpoint first", "raw first")


def _rounds_of(values: list[float], order: str) -> list[float]:
    """The values of the rounds run in ``order`` (one of ORDERS)."""
    return values[ORDERS.index(order) :: len(ORDERS)]


def _first_slot_ratios(series: dict[str, list[float]]) -> dict[str, float]:
    """Raw over checkpoint seconds, each the median of the rounds where that side ran first."""
    first = {
        k: statistics.median(_rounds_of(v, ORDERS[0] if k in ("save_s", "load_s") else ORDERS[1]))
        for k, v in series.items()
    }
    return {
        "save": first["raw_write_s"] / first["save_s"],
        "load": first["raw_read_s"] / first["load_s"],
    }


def summarize(
    repeats: list[dict[str, float]], nbytes: int, target: float = BANDWIDTH_TARGET
) -> dict[str, Any]:
    """Medians, bandwidths, ratios and verdicts from per-repeat seconds of the same bytes.

    ``repeats``: one dict per repeat with ``save_s``, ``raw_write_s``, ``load_s`` and
    ``raw_read_s``. The ratio of two bandwidths of equal bytes is the inverse ratio of
    their median seconds.
    """
    if not repeats:
        raise BenchmarkError("no repeats to summarize")
    keys = ("save_s", "raw_write_s", "load_s", "raw_read_s")
    series = {k: [float(r[k]) for r in repeats] for k in keys}
    medians = {k: statistics.median(v) for k, v in series.items()}
    bw = {k.removesuffix("_s"): bandwidth(nbytes, s) for k, s in medians.items()}
    ratios = {
        "save": bw["save"] / bw["raw_write"],
        "load": bw["load"] / bw["raw_read"],
    }
    paired = {
        "save": [w / s for s, w in zip(series["save_s"], series["raw_write_s"], strict=True)],
        "load": [r / s for s, r in zip(series["load_s"], series["raw_read_s"], strict=True)],
    }
    return {
        "median_s": medians,
        "bandwidth_bytes_per_s": bw,
        "bandwidth_mib_per_s": {k: v / MIB for k, v in bw.items()},
        "ratio": ratios,
        "paired_ratio": paired,
        "paired_ratio_median": {k: statistics.median(v) for k, v in paired.items()},
        # Rounds alternate which side runs first; the paired ratios of each order apart.
        "paired_ratio_median_by_order": {
            order: {k: statistics.median(_rounds_of(v, order)) for k, v in paired.items()}
            for i, order in enumerate(ORDERS)
            if len(repeats) > i
        },
        # The order effect (the second side of a pair pays for the first's write-back)
        # multiplies a pair's ratio one way in even rounds and the other way in odd ones;
        # the geometric mean of the paired ratios cancels it when the orders are balanced.
        "paired_ratio_geomean": {k: statistics.geometric_mean(v) for k, v in paired.items()},
        # Each side timed only when it ran first in its pair (nothing of the other side
        # before it): the raw side's median over raw-first rounds over the checkpoint's
        # median over checkpoint-first rounds. Needs both orders (two rounds or more).
        "first_slot_ratio": _first_slot_ratios(series) if len(repeats) > 1 else None,
        # (max - min) / median per series: how much the machine alone moves a number.
        "relative_spread": {k.removesuffix("_s"): _spread(v) for k, v in series.items()},
        "target_ratio": target,
        "target_met": {k: v >= target for k, v in ratios.items()},
    }


# ---------------------------------------------------------------- the benchmark


def _free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


def _mount_of(path: Path) -> dict[str, Any]:
    """The mount holding ``path`` (longest mount-point prefix in /proc/mounts)."""
    resolved = str(path.resolve())
    best = {"mount_point": None, "device": None, "type": None}
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount_point, fs_type, *_ = line.split()
            inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= len(best["mount_point"] or ""):
                # The device by its name only (vda, not /dev/vda): evidence holds no path.
                best = {"mount_point": mount_point, "device": Path(device).name, "type": fs_type}
    return best


def _filesystem(directory: Path) -> dict[str, Any]:
    """The mount holding ``directory``, and what the numbers on it are the disk's: for a
    loop device, the file system its backing file lies on (tmpfs: the disk is RAM); the
    bandwidth limits a cgroup puts on this process for the device (a throttled device)."""
    found = _mount_of(directory)
    st_dev = os.stat(directory).st_dev
    device = found["device"] or ""
    if device.startswith("loop"):
        with contextlib.suppress(OSError):
            backing = Path("/sys/block", device, "loop/backing_file").read_text().strip()
            found["loop_backing_file_system"] = _mount_of(Path(backing))["type"]
    return {
        **found,
        "same_device_as_repo": st_dev == os.stat(ROOT).st_dev,
        "throttled_bytes_per_s": bandwidth_limits(os.major(st_dev), os.minor(st_dev)),
    }


def bandwidth_limits(major: int, minor: int, root: Path = Path("/")) -> dict[str, int]:
    """The read and write bandwidth limits (bytes/s) this process's cgroup sets on device
    ``major:minor`` (cgroup v1 blkio.throttle.*_bps_device, or v2 io.max): empty when none
    (limits set on an ancestor group are not looked for). ``root``: where /proc and /sys
    are (a test's fake tree)."""
    try:
        groups = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    device, limits = f"{major}:{minor}", {}
    for line in groups:
        _, controllers, group = line.split(":", 2)
        group = group.lstrip("/")
        if "blkio" in controllers.split(","):
            limits |= _blkio_limits(root / "sys/fs/cgroup/blkio" / group, device)
        elif controllers == "":  # the v2 hierarchy, mounted alone or beside v1
            for base in ("sys/fs/cgroup", "sys/fs/cgroup/unified"):
                limits |= _io_max_limits(root / base / group / "io.max", device)
    return limits


def _blkio_limits(group: Path, device: str) -> dict[str, int]:
    """cgroup v1: lines "MAJOR:MINOR BYTES_PER_S" in blkio.throttle.{read,write}_bps_device."""
    limits = {}
    for side in ("read", "write"):
        with contextlib.suppress(OSError):
            for entry in (group / f"blkio.throttle.{side}_bps_device").read_text().splitlines():
                dev, value = entry.split()
                if dev == device:
                    limits[side] = int(value)
    return limits


def _io_max_limits(io_max: Path, device: str) -> dict[str, int]:
    """cgroup v2: lines "MAJOR:MINOR rbps=N wbps=max riops=... wiops=..." in io.max."""
    limits = {}
    with contextlib.suppress(OSError):
        for entry in io_max.read_text().splitlines():
            dev, *settings = entry.split()
            if dev != device:
                continue
            for key, value in (setting.split("=") for setting in settings):
                side = {"rbps": "read", "wbps": "write"}.get(key)
                if side and value != "max":
                    limits[side] = int(value)
    return limits


def _estimated_bytes(model: Llama) -> int:
    """fp32 weights + exp_avg + exp_avg_sq: what the checkpoint's tensors take."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters())


@dataclasses.dataclass
class _Bench:
    """What every measurement of one run shares."""

    model: Llama
    optimizer: torch.optim.AdamW
    state: TrainingState
    expected: list[float]  # fingerprint() of what was saved
    write_chunk: int  # bytes per raw write() call
    read_buffer: mmap.mmap  # the raw reader's destination (aligned); its size is the read chunk
    drop_caches: bool  # write drop_caches before reads (only when permitted)


def measure_save(bench: _Bench, run_dir: Path) -> dict[str, Any]:
    saved = timed_save(run_dir, bench.model, bench.optimizer, bench.state)
    sizes = {str(p.relative_to(run_dir)): p.stat().st_size for p in checkpoint_files(run_dir)}
    return {
        "save_s": saved["seconds"],
        "save_cpu_s": saved["cpu_s"],
        "save_system_s": saved["system_s"],
        "save_hash_s": saved["hash_s"],
        "save_optimizer_copy_s": saved["optimizer_copy_s"],
        "checkpoint": saved["path"],
        "files": sizes,
        "bytes": sum(sizes.values()),
    }


def measure_raw_write(bench: _Bench, raw_file: Path, nbytes: int) -> dict[str, Any]:
    sources = tensor_bytes(bench.model, bench.optimizer)
    seconds, how = raw_write(raw_file, nbytes, sources, bench.write_chunk)
    return {"raw_write_s": seconds, "raw_write_io": how}


def warm_up_write(bench: _Bench, scratch: Path, nbytes: int) -> dict[str, Any]:
    """One raw write of ``nbytes``, deleted, before the rounds, timed but not counted: the
    first write of this size in a process pays for something neither side owns (on the
    development VM 8.3-8.5 s for 4.48 GB, against 2.8-2.9 s for the next one, whether the
    raw write or the save came first), and round 0 always puts the save first."""
    path = scratch / "warm-up.bin"
    sources = tensor_bytes(bench.model, bench.optimizer)
    seconds, how = raw_write(path, nbytes, sources, bench.write_chunk)
    path.unlink()
    os.sync()
    return {"write_s": seconds, "bytes": nbytes, "io": how, "counted": False}


def measure_load(bench: _Bench, checkpoint: Path) -> dict[str, Any]:
    resident = cold(checkpoint_files(checkpoint.parent), drop_caches=bench.drop_caches)
    zero_everything(bench.model, bench.optimizer)
    loaded = timed_load(checkpoint, bench.model, bench.optimizer)
    file_mapped = mapped_into_process(checkpoint / OPTIMIZER_FILE)
    touch_s = first_touch_s(bench.model, bench.optimizer)
    if fingerprint(bench.model, bench.optimizer) != bench.expected:
        raise BenchmarkError(
            f"{checkpoint}: the load did not restore the saved weights and AdamW state"
        )
    return {
        "load_s": loaded["seconds"],
        "load_cpu_s": loaded["cpu_s"],
        "load_system_s": loaded["system_s"],
        "load_hash_s": loaded["hash_s"],
        "load_first_touch_s": touch_s,
        "optimizer_state_file_mapped": file_mapped,
        "load_resident_before": resident,
    }


def measure_raw_read(bench: _Bench, raw_file: Path, nbytes: int) -> dict[str, Any]:
    resident = cold([raw_file], drop_caches=bench.drop_caches)
    seconds, got, how = raw_read(raw_file, bench.read_buffer)
    if got != nbytes:
        raise BenchmarkError(f"{raw_file}: read {got} bytes, {nbytes} were written")
    return {"raw_read_s": seconds, "raw_read_io": how, "raw_read_resident_before": resident}


def time_a_resume(checkpoint: Path, preset_name: str) -> dict[str, Any]:
    """One load of ``checkpoint`` as a resume does it, in this (fresh) process: into a model
    just built from the preset (other weights than the saved ones) and an AdamW with no
    state yet. Its seconds and CPU, and the fingerprint of what it restored."""
    model = build_model(preset(preset_name), seed=MODEL_SEED + 1)
    optimizer = _adamw(model)
    with spending() as spent:
        load.load_checkpoint(checkpoint, model, optimizer)
    return {
        "load_s": spent.seconds,
        "cpu_s": spent.cpu,
        "system_s": spent.system,
        "fingerprint": fingerprint(model, optimizer),
    }


def _resume_command(checkpoint: Path, preset_name: str) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--time-a-resume",
        str(checkpoint),
        "--preset",
        preset_name,
        "--threads",
        str(torch.get_num_threads()),
    ]


def resumes_in_fresh_processes(bench: _Bench, checkpoint: Path, preset_name: str) -> list[dict]:
    """RESUMES loads of ``checkpoint``, each in a new interpreter from a cold page cache
    (time_a_resume): what a resume pays. The rounds load in one process, which takes back
    memory it has just freed; a resume makes every byte fresh memory of its own, and on a VM
    that returns free memory to its host that is what costs (4.2-5.5 s against 2.7-3.0 s
    in the rounds on the development VM, 370M). A resume that restores other values than
    the saved ones stops the run."""
    resumes = []
    for _ in range(RESUMES):
        resident = cold(checkpoint_files(checkpoint.parent), drop_caches=bench.drop_caches)
        command = _resume_command(checkpoint, preset_name)
        ran = subprocess.run(command, capture_output=True, text=True, check=False)
        if ran.returncode != 0:
            raise BenchmarkError(f"a resume from {checkpoint} failed:\n{ran.stderr[-2000:]}")
        resumed = json.loads(ran.stdout.splitlines()[-1])
        if resumed.pop("fingerprint") != bench.expected:
            raise BenchmarkError(
                f"{checkpoint}: a resume did not restore the saved weights and AdamW state"
            )
        resumes.append({**resumed, "resident_before": resident})
    return resumes


def run_round(bench: _Bench, scratch: Path, index: int, nbytes: int | None) -> dict[str, Any]:
    """The checkpoint's save and load, and the raw write and read beside them; even rounds
    put the checkpoint first. Each side writes, reads back and deletes its files before the
    other side starts, so each write lands on the space the side before it freed.

    Round 0 is even: its save sets ``nbytes``, the size every raw file is written at.
    """
    run_dir, raw_file = scratch / f"run-{index}", scratch / f"raw-{index}.bin"
    order = ORDERS[index % len(ORDERS)]

    def checkpoint_side() -> tuple[dict[str, Any], dict[str, Any]]:
        saved = measure_save(bench, run_dir)
        loaded = measure_load(bench, saved["checkpoint"])
        shutil.rmtree(run_dir)
        return saved, loaded

    def raw_side(size: int) -> tuple[dict[str, Any], dict[str, Any]]:
        wrote = measure_raw_write(bench, raw_file, size)
        read = measure_raw_read(bench, raw_file, size)
        written = raw_file.stat().st_size
        raw_file.unlink()
        if written != size:
            raise BenchmarkError(f"round {index}: raw file {written} bytes, expected {size}")
        return wrote, read

    if order == ORDERS[0]:
        saved, loaded = checkpoint_side()
        nbytes = saved["bytes"] if nbytes is None else nbytes
        wrote, read = raw_side(nbytes)
    elif nbytes is None:
        raise BenchmarkError(f"round {index}: the raw side needs the checkpoint's size first")
    else:
        wrote, read = raw_side(nbytes)
        saved, loaded = checkpoint_side()
    if saved["bytes"] != nbytes:
        raise BenchmarkError(
            f"round {index}: checkpoint {saved['bytes']} bytes, expected {nbytes}: "
            "both sides must move the same bytes"
        )
    return {
        "order": order,
        **{k: v for k, v in saved.items() if k not in ("checkpoint", "files")},
        **wrote,
        **loaded,
        **read,
        "files": saved["files"],
    }


# ---------------------------------------------------------------- what bounds each side


def _ranges_of(pieces: list[memoryview], range_bytes: int) -> list[memoryview]:
    return [p[i : i + range_bytes] for p in pieces for i in range(0, len(p), range_bytes)]


def hash_seconds(pieces: list[memoryview], range_bytes: int, hashers: int) -> dict[str, float]:
    """CPU seconds of the digests, from memory (no disk in them), median of three:

    - ``one_stream_s``: one sha256 over every byte, the whole-file digest a format 1 load
      must verify (one core, however many it has);
    - ``ranges_one_thread_s``: the sha256 of every ``range_bytes`` range on one thread: the
      core-seconds of hashing in a format 3 load or save, however they are spread;
    - ``ranges_all_cores_s``: the sha256 of every ``range_bytes`` range on ``hashers``
      threads, what a load verifies (trainer.checkpoint.verify) and, since format 3, all a
      save computes (trainer.checkpoint.durable);
    - ``format_2_save_digests_s``: a format 2 save's two digest streams (whole file and
      ranges) side by side on two threads, what bounded the save before format 3."""

    def one_stream() -> None:
        digest = hashlib.sha256()
        for piece in pieces:
            digest.update(piece)

    def ranges_one_thread() -> None:
        for view in _ranges_of(pieces, range_bytes):
            hashlib.sha256(view)

    def ranges_all_cores() -> None:
        with ThreadPoolExecutor(hashers) as pool:
            list(
                pool.map(
                    lambda view: hashlib.sha256(view).digest(), _ranges_of(pieces, range_bytes)
                )
            )

    def save_digests() -> None:
        threads = [threading.Thread(target=f) for f in (one_stream, ranges_one_thread)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def timed(work: Callable[[], None]) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    return {
        "one_stream_s": timed(one_stream),
        "ranges_one_thread_s": timed(ranges_one_thread),
        "ranges_all_cores_s": timed(ranges_all_cores),
        "format_2_save_digests_s": timed(save_digests),
    }


def bounds(rounds: list[dict[str, Any]], hashing: dict[str, float], cores: int) -> dict[str, Any]:
    """Which resource bounds each side, from two floors measured apart: the disk's (the raw
    twin's median time for the same bytes) and the CPU's (the side's own median CPU seconds,
    every thread, over ``cores``: the least time that work could take on them). A side is
    bound by the higher floor, and ``*_beyond_floor_s`` says how far its median time lies
    above that floor (work that did not overlap). The CPU seconds are split into the
    hashing's (the ranges' sha256 from memory on one thread: its core-seconds), the
    kernel's (system time: faults of fresh memory, copies, I/O set-up) and the rest.

    Until 2026-11-30 the CPU floor was the hashing's alone, and a load that spent as long
    again in the kernel making 4.5 GB of fresh memory its own was called bound by the disk
    while taking 1.7 times the disk's time. ``load_format_1`` and ``save_format_2`` still
    compare the disk with hashing alone: what bounded a format 1 load (one sha256 stream)
    and a format 2 save (two)."""

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    raw = {"load": median("raw_read_s"), "save": median("raw_write_s")}
    hashing_core_s = hashing["ranges_one_thread_s"]
    sides: dict[str, Any] = {}
    for side, disk_s in raw.items():
        cpu_s, system_s = median(f"{side}_cpu_s"), median(f"{side}_system_s")
        cpu_floor_s = cpu_s / cores
        sides[side] = "disk" if disk_s >= cpu_floor_s else "CPU"
        sides[f"{side}_cpu_floor_s"] = cpu_floor_s
        sides[f"{side}_cpu_s"] = {
            "total": cpu_s,
            "hashing": hashing_core_s,
            "system": system_s,
            "other": cpu_s - system_s - hashing_core_s,
        }
        sides[f"{side}_beyond_floor_s"] = median(f"{side}_s") - max(disk_s, cpu_floor_s)

    def by_hashing(disk_s: float, hash_s: float) -> str:
        return "disk" if disk_s >= hash_s else "hashing (CPU)"

    return {
        "disk_read_s": raw["load"],
        "disk_write_s": raw["save"],
        "cores": cores,
        **hashing,
        **sides,
        "load_format_1": by_hashing(raw["load"], hashing["one_stream_s"]),
        "save_format_2": by_hashing(raw["save"], hashing["format_2_save_digests_s"]),
        "note": "disk_*_s: the raw twin's median time (the disk alone); *_cpu_floor_s: the "
        "side's median CPU seconds (this process, every thread) over the cores it may run "
        "on; *_cpu_s: those seconds split into hashing (the ranges' sha256 from memory on "
        "one thread, median of three), system (the kernel's) and other; a side is bound by "
        "the higher floor. CPU spent outside the process (a loop device's worker thread) is "
        "in no floor: it shows in *_beyond_floor_s. "
        "load_format_1 and save_format_2: the disk against one sha256 stream (format 1 "
        "load) or a format 2 save's two digests, by hashing time alone",
    }


def _training_state(preset_name: str) -> TrainingState:
    return TrainingState(
        step=STEP,
        epoch=0,
        epoch_step=STEP,
        scheduler_step=STEP,
        config_hash=config_hash({"benchmark": "bench_checkpoint", "preset": preset_name}),
        data_manifest_sha256=None,
        seed=MODEL_SEED,
    )


def run_benchmark(
    preset_name: str,
    *,
    repeats: int,
    directory: Path,
    write_chunk_kib: int = 1024,
    read_chunk_kib: int = 65536,
    drop_caches: bool = True,
) -> dict[str, Any]:
    """``repeats`` rounds of save/raw write and load/raw read in a scratch folder of
    ``directory`` (removed afterwards); medians, bandwidths, ratios and verdicts."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for name, kib in (("write_chunk_kib", write_chunk_kib), ("read_chunk_kib", read_chunk_kib)):
        if kib < 1:
            raise ValueError(f"{name} must be >= 1, got {kib}")
    cfg = preset(preset_name)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model, optimizer = trained_one_step(cfg, seed=MODEL_SEED)
    needed = 2 * _estimated_bytes(model) * 105 // 100  # checkpoint + raw file, 5 % slack
    free = _free_bytes(directory)
    if free < needed:
        raise BenchmarkError(
            f"{directory}: {free} bytes free; a checkpoint and its raw twin need about {needed}"
        )
    dropping = drop_caches_status(drop_caches)
    bench = _Bench(
        model=model,
        optimizer=optimizer,
        state=_training_state(preset_name),
        expected=fingerprint(model, optimizer),
        write_chunk=write_chunk_kib * 1024,
        read_buffer=mmap.mmap(
            -1, -(-read_chunk_kib * 1024 // durable.DIRECT_ALIGN) * durable.DIRECT_ALIGN
        ),
        drop_caches=dropping == "used",
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-checkpoint-", dir=directory))
    rounds: list[dict[str, Any]] = []
    nbytes: int | None = None
    try:
        warm_up = warm_up_write(bench, scratch, _estimated_bytes(model))
        for index in range(repeats):
            rounds.append(run_round(bench, scratch, index, nbytes))
            nbytes = rounds[0]["bytes"]
        saved = measure_save(bench, scratch / "resume")
        resumes = resumes_in_fresh_processes(bench, saved["checkpoint"], preset_name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    total = _known(nbytes)
    hashing = hash_seconds(tensor_bytes(model, optimizer), manifest.RANGE_BYTES, verify.HASHERS)
    return {
        "workload": {
            "preset": preset_name,
            "model": dataclasses.asdict(cfg),
            "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "optimizer": "torch.optim.AdamW after one real step (exp_avg, exp_avg_sq, step)",
            "checkpoint_bytes": total,
            "checkpoint_files": rounds[0]["files"],
            "repeats": repeats,
            "order": "(save, load, delete) and (raw write, raw read, delete), one side "
            "after the other: checkpoint first in even rounds, raw first in odd ones",
            "save": "trainer.checkpoint.save.save_checkpoint: every file written (the "
            "tensor files straight from the weights' and AdamW state's memory, no copy) "
            "and hashed from the bytes written, as they are written: the sha256 of each "
            f"range on {manifest.HASHERS} threads behind the writer (checkpoint format 3); "
            "every fsync, the manifest and the renames included",
            "load": "trainer.checkpoint.load.load_checkpoint: one read of every file, in "
            "parallel, the sha256 of each range of each file hashed as it is read on "
            f"{verify.HASHERS} threads (checkpoint format 3, ranges of "
            f"{manifest.RANGE_BYTES // MIB} MiB); size, per-range sha256 and content checks of "
            "every file before anything is restored, each file read into the process's "
            "own memory (O_DIRECT where the file system allows it) and hashed there; "
            "weights (copied into the model), "
            "AdamW state (tensors over the very bytes of optimizer.safetensors that were "
            "read and hashed, no copy) and RNGs restored into zeroed tensors; what a first "
            "write of every page costs after the load is load_first_touch, apart",
            "sha256_included": {"save": True, "load": True},
            "raw": "one file of checkpoint_bytes holding the same weight and AdamW bytes: "
            "written in order through the checkpoint's file writer (direct: one 4 MiB aligned "
            f"buffer a write(); buffered: {write_chunk_kib} KiB write() calls) + fsync; "
            f"sequential {read_chunk_kib} KiB readinto() calls into one aligned buffer",
            "raw_io": raw_io(rounds),
            "write_chunk_kib": write_chunk_kib,
            "read_chunk_kib": read_chunk_kib,
            "directory": portable_path(directory, ROOT),
            "filesystem": _filesystem(directory),
            "roundtrip_exact": True,  # checked after every load; a mismatch stops the run
        },
        "cache_eviction": {
            "method": [
                "fsync + posix_fadvise(POSIX_FADV_DONTNEED) on every file before each read",
                f"sync; vm.drop_caches = 1 (sysctl) before each read: {dropping}",
            ],
            "drop_caches": dropping,
            "verified_with": "mincore(2) over every file about to be read",
            "max_resident_fraction_allowed": MAX_RESIDENT,
            "max_resident_fraction_seen": max(
                *(max(r["load_resident_before"], r["raw_read_resident_before"]) for r in rounds),
                *(r["resident_before"] for r in resumes),
            ),
        },
        "repeats": [{k: v for k, v in r.items() if k != "files"} for r in rounds],
        **summarize(rounds, total),
        "hashing": {
            "save_hash_s_median": statistics.median(r["save_hash_s"] for r in rounds),
            "load_hash_s_median": statistics.median(r["load_hash_s"] for r in rounds),
            "save_optimizer_copy_s_median": statistics.median(
                r["save_optimizer_copy_s"] for r in rounds
            ),
            "note": "save_hash_s: build_manifest inside the save (the digests were computed "
            "while writing; it hashes only a file whose writer returned none); "
            "save_optimizer_copy_s: optimizer_tensors (names the optimizer's own tensors, "
            "no copy); load_hash_s: verify_checkpoint inside the load, the load's one cold "
            "read of every file with its sha256 (each range read into the process's own "
            "memory and hashed there, which the load then builds its tensors over)",
        },
        "bound": bounds(rounds, hashing, len(os.sched_getaffinity(0))),
        "warm_up": warm_up,
        "resume": _resume_summary(resumes, rounds),
        "load_first_touch": _first_touch_summary(rounds),
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "machine": {
            "cpu_count": os.cpu_count(),
            # What this process may run on (taskset, a container's cpuset): the hashing
            # rate that bounds a load is this many cores', whatever cpu_count says.
            "cpu_affinity": sorted(os.sched_getaffinity(0)),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        },
    }


def _resume_summary(resumes: list[dict[str, Any]], rounds: list[dict[str, Any]]) -> dict:
    load_s = statistics.median(r["load_s"] for r in resumes)
    raw_read_s = statistics.median(r["raw_read_s"] for r in rounds)
    return {
        "runs": resumes,
        "load_s_median": load_s,
        "ratio_to_raw_read": raw_read_s / load_s,
        "cpu_s_median": statistics.median(r["cpu_s"] for r in resumes),
        "system_s_median": statistics.median(r["system_s"] for r in resumes),
        "note": f"{RESUMES} loads, each in a new interpreter that built the model and an "
        "AdamW with no state (a resume), from a cold page cache, after the rounds; not in "
        "the ratios above, which are the rounds' (loads in one process)",
    }


def _first_touch_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The load's deferred page faults, and the load ratio were they counted in."""
    touch = statistics.median(r["load_first_touch_s"] for r in rounds)
    with_touch = statistics.median(r["load_s"] + r["load_first_touch_s"] for r in rounds)
    return {
        "first_touch_s_median": touch,
        "optimizer_state_file_mapped": [r["optimizer_state_file_mapped"] for r in rounds],
        "load_plus_first_touch_s_median": with_touch,
        "ratio_load_plus_first_touch": statistics.median(r["raw_read_s"] for r in rounds)
        / with_touch,
        "touch": "write",
        "note": "first_touch_s: writing one element of every page of the restored weights "
        "and AdamW state once, right after the load (not in load_s), as the first optimizer "
        "step does. When the optimizer state is file-mapped (a copy-on-write mapping of "
        "optimizer.safetensors: since issue 21 the mapping the load's verification hashed), "
        "the loader's time excludes materializing it, and the first write copies every page: "
        "load_plus_first_touch is what a resume costs before its first step completes.",
    }


def _known(nbytes: int | None) -> int:
    if nbytes is None:
        raise BenchmarkError("no round completed: the checkpoint's size is unknown")
    return nbytes


def _table(result: dict[str, Any]) -> str:
    lines = [f"{'repeat':>6}  {'save s':>8}  {'raw w s':>8}  {'load s':>8}  {'raw r s':>8}"]
    for i, r in enumerate(result["repeats"], 1):
        lines.append(
            f"{i:>6}  {r['save_s']:>8.2f}  {r['raw_write_s']:>8.2f}  {r['load_s']:>8.2f}  "
            f"{r['raw_read_s']:>8.2f}"
        )
    m = result["median_s"]
    lines.append(
        f"{'median':>6}  {m['save_s']:>8.2f}  {m['raw_write_s']:>8.2f}  {m['load_s']:>8.2f}  "
        f"{m['raw_read_s']:>8.2f}"
    )
    bw = result["bandwidth_mib_per_s"]
    for side, raw in (("save", "raw_write"), ("load", "raw_read")):
        verdict = "met" if result["target_met"][side] else "NOT met"
        lines.append(
            f"{side}: {bw[side]:,.0f} MiB/s vs raw {bw[raw]:,.0f} MiB/s = "
            f"{result['ratio'][side]:.1%} (target >= {result['target_ratio']:.0%}: {verdict}); "
            f"paired median {result['paired_ratio_median'][side]:.1%}, "
            f"geometric mean {result['paired_ratio_geomean'][side]:.1%}"
            + (
                f", first slot {result['first_slot_ratio'][side]:.1%}"
                if result["first_slot_ratio"]
                else ""
            )
        )
    resume = result["resume"]
    lines.append(
        f"a resume's load (a fresh process, median of {len(resume['runs'])}): "
        f"{resume['load_s_median']:.2f} s = {resume['ratio_to_raw_read']:.1%} of raw read; "
        f"CPU {resume['cpu_s_median']:.2f} core-s, kernel {resume['system_s_median']:.2f}"
    )
    touch = result["load_first_touch"]
    lines.append(
        f"load + first write of every page: {touch['load_plus_first_touch_s_median']:.2f} s "
        f"(first write {touch['first_touch_s_median']:.2f} s) = "
        f"{touch['ratio_load_plus_first_touch']:.1%} of raw read"
    )
    h = result["hashing"]
    lines.append(
        f"sha256 inside: the load's verification {h['load_hash_s_median']:.2f} s; the save "
        f"hashes as it writes (build_manifest after it: {h['save_hash_s_median']:.2f} s); "
        f"{result['workload']['checkpoint_bytes']:,} bytes; "
        f"drop_caches {result['cache_eviction']['drop_caches']}; raw write "
        f"{result['workload']['raw_io']['write']}, raw read {result['workload']['raw_io']['read']}"
    )
    fs = result["workload"]["filesystem"]
    disk = f"disk: {fs['type']} on {fs['device']}"
    if "loop_backing_file_system" in fs:
        disk += f" (a loop device whose backing file is on {fs['loop_backing_file_system']})"
    for side, limit in fs["throttled_bytes_per_s"].items():
        disk += f", {side}s throttled to {limit / 1e9:.2f} GB/s (cgroup)"
    lines.append(disk)
    b = result["bound"]
    for side, io in (("load", "read"), ("save", "write")):
        cpu = b[f"{side}_cpu_s"]
        lines.append(
            f"bound: {side} by {b[side]}: disk {io} {b[f'disk_{io}_s']:.2f} s, CPU "
            f"{cpu['total']:.2f} core-s (hashing {cpu['hashing']:.2f}, kernel "
            f"{cpu['system']:.2f}, other {cpu['other']:.2f}) on {b['cores']} cores = "
            f"{b[f'{side}_cpu_floor_s']:.2f} s; {b[f'{side}_beyond_floor_s']:+.2f} s beyond "
            "the higher floor"
        )
    lines.append(
        f"hashing alone: a format 1 load was bound by {b['load_format_1']} (one stream "
        f"{b['one_stream_s']:.2f} s), a format 2 save by {b['save_format_2']} (two digests "
        f"{b['format_2_save_digests_s']:.2f} s)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="370m", help="model preset (tiny for a smoke run)")
    parser.add_argument(
        "--repeats", type=int, default=8, help="rounds of each measurement (even: balanced)"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the scratch checkpoints and raw files go (the disk being measured)",
    )
    parser.add_argument("--write-chunk-kib", type=int, default=1024, help="raw write() size")
    parser.add_argument("--read-chunk-kib", type=int, default=65536, help="raw readinto() size")
    parser.add_argument(
        "--no-drop-caches",
        action="store_true",
        help="evict with fsync + posix_fadvise only, never write /proc/sys/vm/drop_caches",
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", type=Path)
    parser.add_argument("--commit", help="the commit measured, where this tree's git cannot tell")
    parser.add_argument("--time-a-resume", type=Path, help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args(argv)
    if args.time_a_resume:  # resumes_in_fresh_processes' child: one JSON line
        torch.set_num_threads(args.threads)
        print(json.dumps(time_a_resume(args.time_a_resume, args.preset)))
        return 0

    started = time.perf_counter()
    load_before = os.getloadavg()  # others' work on a shared machine shows up here
    torch.set_num_threads(args.threads)
    result = run_benchmark(
        args.preset,
        repeats=args.repeats,
        directory=args.dir,
        write_chunk_kib=args.write_chunk_kib,
        read_chunk_kib=args.read_chunk_kib,
        drop_caches=not args.no_drop_caches,
    )
    from gates.provenance.evidence import git_info, host_info, utc_now  # noqa: PLC0415

    result["wall_s"] = time.perf_counter() - started
    result["machine"]["load_average_1_5_15"] = {"before": load_before, "after": os.getloadavg()}
    result["captured_at"] = utc_now()
    from gates.io.machine_paths import portable_command  # noqa: PLC0415

    typed = sys.argv[1:] if argv is None else argv
    result["command"] = " ".join(  # no machine's paths in evidence (--dir /tmp/x: …/x)
        portable_command("python", ["tools/bench_checkpoint.py", *typed], ROOT)
    )
    result["host"] = host_info()
    if args.commit:  # a device machine's copy of the tree may carry another git history
        result["git"] = {"commit": args.commit, "dirty": None, "note": "as given by --commit"}
    else:
        result["git"] = git_info(ROOT)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    print(_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
