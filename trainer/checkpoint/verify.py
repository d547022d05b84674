"""Whether a checkpoint's bytes are what its manifest says: the one gate before any load.

    report = inspect_checkpoint(path)           # every verdict, never raises on bad data
    report.valid, report.problems, report.files
    verify_checkpoint(path, architecture=cfg)   # CheckpointError listing every problem

Checked: manifest present and readable; every listed file present with its size and
sha256 (formats 2 and 3: the sha256 of each of its ranges; format 1: of the whole file); every
file of the format listed and no other file in the directory (a planted ``.pt`` is refused,
never ignored); the model file's header holds the architecture's
tensors (names, shapes, count, parameter count, dtype); the optimizer file holds, for
every parameter of that architecture or for none, exp_avg and exp_avg_sq of its shape and a
one-element step, and nothing of no parameter; every RNG tensor is a generator state of its
generator's size and rng.json's Python and NumPy states are ones their generators take;
state.json is a training state; the step matches the directory name; and, when asked, the
architecture is the expected one. A checkpoint whose hashes agree with damaged contents
(written by hand, or by another program) is refused here, so a resume falls back past it
instead of failing mid-load.

Speed (issues 21, 35): the files are read and hashed in parallel; a format 2 or 3 file's
ranges are hashed on every core (HASHERS threads) as they are read, so one large file is not
one core's sha256 stream; and a loader asks to ``keep`` the files it needs
(``inspect_checkpoint(..., keep=LOADED)``): each is read once, into the process's own memory
(directly from the device where the file system allows it, _KeptReader), and the load builds
its tensors over the very bytes that were hashed, neither reading nor copying them again
(trainer/checkpoint/load.py). Nothing is mapped: a file truncated while it is read is a short
read, refused by its size, never a SIGBUS.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import mmap
import os
import queue
import random
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

from gates.io.files import NotRegularFileError, open_regular, read_regular
from trainer.checkpoint.durable import DIRECT_ALIGN
from trainer.checkpoint.layout import (
    CHECKPOINT_STATE_FILE,
    DATA_FILES,
    MANIFEST_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    RNG_JSON_FILE,
    RNG_TENSOR_FILE,
    CheckpointError,
    step_of,
)
from trainer.checkpoint.manifest import HASHERS, read_manifest
from trainer.checkpoint.state import state_problems
from trainer.model.config import LlamaConfig, ModelConfigError
from trainer.model.params import parameter_shapes
from trainer.userfiles import display, is_utf8_name

_DTYPES = {"F64": "float64", "F32": "float32", "BF16": "bfloat16", "F16": "float16"}


@dataclass
class FileVerdict:
    name: str
    ok: bool
    reason: str  # "ok", or what is wrong
    size: int | None = None
    sha256: str | None = None
    # The verified file's bytes in the process's memory, when the caller asked to keep it.
    contents: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("name", "ok", "reason", "size", "sha256")}


@dataclass
class Inspection:
    path: Path
    manifest: dict[str, Any] | None = None
    files: list[FileVerdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    def contents(self, name: str) -> torch.Tensor | None:
        """The verified bytes of file ``name`` when they were kept; None otherwise."""
        for verdict in self.files:
            if verdict.name == name and verdict.ok:
                return verdict.contents
        return None

    def to_json(self) -> dict[str, Any]:
        m = self.manifest or {}
        return {
            "path": str(self.path),
            "valid": self.valid,
            "format": m.get("format"),
            "format_version": m.get("format_version"),
            "step": m.get("step"),
            "tensor_count": m.get("tensor_count"),
            "parameter_count": m.get("parameter_count"),
            "dtype": m.get("dtype"),
            "architecture": m.get("architecture"),
            "files": [v.to_json() for v in self.files],
            "problems": list(self.problems),
        }


#: Bytes read and hashed per piece of a format 1 file (one sha256 stream).
READ_CHUNK = 64 * 1024 * 1024
#: Bytes per read: the most one pread asks for (_read_exactly), and the pieces a kept file
#: is read in by several threads at once (_KeptReader). The disk's read-ahead window here:
#: 16 and 64 MiB pieces read slower, 2 MiB much slower, on the development VM. A multiple of
#: DIRECT_ALIGN, so that every piece of a kept file but its tail may be read directly.
READ_PIECE = 8 * 1024 * 1024
#: Files read (and hashed) at once.
READERS = 4
#: Ranges (format 1: chunks) asked from the disk ahead of the one being read.
_AHEAD = 2
#: Per file being verified, set by _verdicts (a thread-local so that _file_verdict keeps its
#: (path, entry) form): ``keep``, whether the verdict keeps the bytes it hashed, and
#: ``hashers``, the pool its ranges are hashed on.
_reading = threading.local()


class _ShortReadError(Exception):
    """The file ended before its size: truncated while it was read."""


def _own_memory(size: int) -> torch.Tensor:
    """``size`` bytes of the process's own (anonymous, private) memory, as a uint8 tensor."""
    area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return torch.frombuffer(area, dtype=torch.uint8)  # the tensor keeps the memory alive


class _SpareBuffers:
    """Buffers for the ranges in flight of a file that is not kept: the reader takes one
    (waiting while ``count`` are being hashed), a hasher gives it back once hashed."""

    def __init__(self, size: int, count: int) -> None:
        self._size, self._count, self._made = size, count, 0
        self._free: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()

    def take(self, length: int) -> memoryview:
        try:
            buffer = self._free.get_nowait()
        except queue.Empty:
            if self._made < self._count:
                self._made += 1
                buffer = mmap.mmap(-1, self._size)  # page-aligned: a direct read's memory
            else:
                buffer = self._free.get()
        return memoryview(buffer)[:length]

    def give(self, view: memoryview) -> None:
        self._free.put(view.obj)


def _read_exactly(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` with the file's bytes from ``offset``, READ_PIECE bytes a pread;
    _ShortReadError if the file ends first."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done : done + READ_PIECE]], offset + done)
        if n == 0:
            raise _ShortReadError
        done += n


def _read_piece(fd: int, direct: int | None, view: memoryview, start: int) -> None:
    """Fill ``view`` with the file's bytes from ``start``: directly (``direct``, the file's
    O_DIRECT descriptor) where its length is a whole number of blocks, its offset and memory
    being aligned by the caller; buffered where there is no direct descriptor, for a tail,
    and for whatever a direct read refuses (EINVAL: alignment this device does not take) or
    leaves unread. _ShortReadError if the file ends first."""
    if direct is not None and len(view) % DIRECT_ALIGN == 0:
        try:
            got = os.preadv(direct, [view], start)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            got = 0
        if got == len(view):
            return
        view, start = view[got:], start + got
    _read_exactly(fd, view, start)


def _read_ahead(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start reading these bytes from disk now (POSIX_FADV_WILLNEED), so
    the disk streams while the bytes before them are copied and hashed."""
    if length > 0 and hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)


def _read_in_order(
    fd: int, size: int, step: int, buffer: Callable[[int], memoryview]
) -> Iterator[memoryview]:
    """The file's ``size`` bytes in order, ``step`` at a time, each read into the view
    ``buffer(length)`` gives (aligned memory). Directly from the device where the file
    system allows it, each step in READ_PIECE pieces on KEPT_READERS threads at once (a
    direct read waits on the device: several keep its queue full); else buffered, the disk
    asked _AHEAD steps ahead: one stream for the disk. Why direct: the file is read once
    and not kept, and a checkpoint just saved is not in the page cache (durable.py writes
    it directly); read through the cache, every byte cost a fresh page of it (4.5 GB: 4.2 s
    of system time against 0.25 s direct on the development VM)."""
    direct = _open_direct(fd) if size >= READ_PIECE else None  # small: one buffered read
    if direct is None:
        _read_ahead(fd, 0, min(size, _AHEAD * step))
    readers = ThreadPoolExecutor(KEPT_READERS, "verify-read") if direct is not None else None
    try:
        for start in range(0, max(size, 1), step):  # an empty file: one empty piece
            view = buffer(min(step, size - start))
            if readers is None:
                ahead = start + _AHEAD * step
                _read_ahead(fd, ahead, min(step, size - ahead))
                _read_exactly(fd, view, start)
            else:
                jobs = [
                    readers.submit(_read_piece, fd, direct, view[at : at + READ_PIECE], start + at)
                    for at in range(0, len(view), READ_PIECE)
                ]
                try:
                    for job in jobs:
                        job.result()
                finally:
                    _settle(jobs)
            yield view
    finally:
        if readers is not None:
            readers.shutdown(wait=True)
            os.close(direct)


def _settle(jobs: list[Future]) -> None:
    """None of ``jobs`` still running when the caller goes on (or gives up): those not
    started are cancelled, the others waited for (their errors are the caller's no more)."""
    for job in jobs:
        job.cancel()
    for job in jobs:
        if not job.cancelled():
            job.exception()


def _hash_stream(fd: int, size: int) -> str:
    """The sha256 of the file's ``size`` bytes (format 1: one stream), read in READ_CHUNK
    pieces into one buffer (page-aligned: a direct read's memory)."""
    digest = hashlib.sha256()
    buffer = memoryview(mmap.mmap(-1, min(size, READ_CHUNK)))
    for view in _read_in_order(fd, size, READ_CHUNK, lambda length: buffer[:length]):
        digest.update(view)
    return digest.hexdigest()


def _hash_ranges(fd: int, size: int, range_bytes: int, hashers: ThreadPoolExecutor) -> list[str]:
    """The sha256 of every ``range_bytes`` range of the file: the digests a format 2 or 3
    manifest lists. The file is read in order (one stream for the disk, asked _AHEAD ranges
    ahead), each range into a spare buffer, and each range read is hashed on one of
    ``hashers`` while the next is read: every core hashes at once."""
    spare = _SpareBuffers(min(range_bytes, max(size, 1)), HASHERS + 1)  # a small file: small

    def digest(view: memoryview) -> str:
        try:
            return _sha256(view)
        finally:
            spare.give(view)

    jobs: list[Future] = []
    try:
        for view in _read_in_order(fd, size, range_bytes, spare.take):
            jobs.append(hashers.submit(digest, view))
        return [job.result() for job in jobs]
    finally:
        _settle(jobs)


#: Reads in flight for a kept file: a direct read waits on the device, so several at once
#: keep its queue full (one at a time read at half the speed on the development VM).
KEPT_READERS = 4


class _KeptReader:
    """A kept file read into ``into`` (own memory) in READ_PIECE pieces on KEPT_READERS
    threads, directly from the device (O_DIRECT) where the file system allows it.

    Why direct: a load needs the bytes in memory it owns (the AdamW state is written in
    place). Read through the page cache, every byte took two fresh pages — the cache's and
    ours — and the faults on fresh memory were most of the load on the development VM (a
    370M verification 5.5-9 s against 2.4-2.6 s over mappings); read directly, the device
    writes into our pages and the page cache is not touched. Buffered ``pread`` is the
    fallback (a file system without O_DIRECT, a tail shorter than a block). A piece starts
    at a multiple of READ_PIECE, in the file and in ``into`` (page-aligned own memory), so
    its offset and its memory are aligned for a direct read; its length is, but for the
    file's tail."""

    def __init__(self, fd: int, into: memoryview, size: int) -> None:
        self._fd, self._into = fd, into
        self._direct = _open_direct(fd)
        starts = range(0, size, READ_PIECE)
        # As many readers as pieces, at most KEPT_READERS (a small file: one).
        self._pool = ThreadPoolExecutor(min(KEPT_READERS, len(starts)), "verify-read")
        self._pieces = [
            (start, self._pool.submit(self._read, start, min(READ_PIECE, size - start)))
            for start in starts
        ]
        self._done = 0  # pieces known read

    def _read(self, start: int, length: int) -> None:
        _read_piece(self._fd, self._direct, self._into[start : start + length], start)

    def wait_until(self, end: int) -> None:
        """Return once every byte before ``end`` is read (_ShortReadError: the file ended)."""
        while self._done < len(self._pieces) and self._pieces[self._done][0] < end:
            self._pieces[self._done][1].result()
            self._done += 1

    def close(self) -> None:
        for _, job in self._pieces:
            job.cancel()
        self._pool.shutdown(wait=True)  # no piece is still being read into ``into``
        if self._direct is not None:
            os.close(self._direct)


def _open_direct(fd: int) -> int | None:
    """A second descriptor of the file open on ``fd``, for direct reads: reopened through
    /proc/self/fd (the very file, whatever was renamed over its path since) and checked to
    be it. None where there is none: no O_DIRECT or /proc, or a file system that refuses
    direct reads (tmpfs)."""
    if not hasattr(os, "O_DIRECT"):
        return None
    try:
        direct = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return None
    opened, wanted = os.fstat(direct), os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (wanted.st_dev, wanted.st_ino):
        os.close(direct)
        return None
    return direct


def _hash_kept(
    fd: int, size: int, range_bytes: int | None, hashers: ThreadPoolExecutor
) -> tuple[list[str], torch.Tensor]:
    """(digests, the file in own memory) of a kept file: read by a _KeptReader, each range
    hashed on ``hashers`` as soon as its bytes are in (format 1: one stream, fed in order)."""
    contents = _own_memory(size)
    into = memoryview(contents.numpy())
    reader = _KeptReader(fd, into, size)
    jobs: list[Future] = []
    try:
        if range_bytes is None:
            digest = hashlib.sha256()
            for start in range(0, size, READ_PIECE):
                reader.wait_until(start + 1)
                digest.update(into[start : start + READ_PIECE])
            return [digest.hexdigest()], contents
        for start in range(0, size, range_bytes):
            end = min(start + range_bytes, size)
            reader.wait_until(end)
            jobs.append(hashers.submit(_sha256, into[start:end]))
        return [job.result() for job in jobs], contents
    finally:
        _settle(jobs)
        reader.close()


def _sha256(view: memoryview) -> str:
    return hashlib.sha256(view).hexdigest()


def _regular_size(path: Path) -> int:
    """The size of the regular file at ``path``; an OSError saying what is there instead
    (gates.io.files: a FIFO, a device, a socket, a dangling symlink, a directory)."""
    fd = open_regular(path)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _what_is_there(exc: OSError) -> str:
    """What a file that cannot be opened as a regular one is, in a verdict's words."""
    if isinstance(exc, IsADirectoryError):
        return "a directory, not a file"
    if isinstance(exc, NotRegularFileError):
        return exc.strerror  # "a FIFO (named pipe), not a regular file", ...
    return f"cannot be read: {exc.strerror or exc}"


def _read_hashed(
    path: Path, size: int, keep: bool, range_bytes: int | None = None
) -> tuple[list[str], int, torch.Tensor | None]:
    """(digests, size found, the verified file when ``keep``) of ``path``, read once: the
    sha256 of each ``range_bytes`` range, hashed on every core (formats 2 and 3), or with
    ``range_bytes`` None the whole file's, one stream (format 1). A kept file is read into
    the process's own memory (_hash_kept) and the load builds its tensors over it (issue
    35): the very bytes hashed, from the descriptor opened here (a file renamed over the
    path meanwhile is not the one loaded), no second read, no copy, writable in place (an
    optimizer step writes the AdamW moments). Others are read through a few reused buffers
    (_hash_ranges, _hash_stream)."""
    fd = open_regular(path)  # a FIFO put in the file's place: refused, never waited on
    try:
        found = os.fstat(fd).st_size
        if found != size:
            return [], found, None
        if size == 0:
            empty = [hashlib.sha256().hexdigest()]
            return empty, 0, torch.empty(0, dtype=torch.uint8) if keep else None
        contents = None
        try:
            if keep:
                digests, contents = _hash_kept(fd, size, range_bytes, _reading.hashers)
            elif range_bytes is None:
                digests = [_hash_stream(fd, size)]
            else:
                digests = _hash_ranges(fd, size, range_bytes, _reading.hashers)
        except _ShortReadError:
            return [], os.fstat(fd).st_size, None
        found = os.fstat(fd).st_size  # grown or truncated meanwhile: refused
        if contents is None or found != size:
            return digests, found, None
        return digests, found, contents
    finally:
        os.close(fd)


def _file_verdict(path: Path, entry: dict[str, Any]) -> FileVerdict:
    """What the file is first (missing, or a FIFO, a device, a directory in its place),
    then its size (a truncated file), then its sha256 (a flipped byte)."""
    try:
        size = _regular_size(path)
    except FileNotFoundError:
        return FileVerdict(path.name, False, "listed in the manifest but missing")
    except OSError as exc:
        return FileVerdict(path.name, False, _what_is_there(exc))
    if size != entry.get("size"):
        return FileVerdict(
            path.name, False, f"size {size} bytes, the manifest says {entry.get('size')}", size
        )
    range_bytes = entry.get("range_bytes")  # formats 2 and 3 (read_manifest checked its ranges)
    try:
        digests, got, contents = _read_hashed(
            path, size, getattr(_reading, "keep", False), range_bytes
        )
    except OSError as exc:  # replaced or made unreadable since its size was taken
        return FileVerdict(path.name, False, _what_is_there(exc), size)
    if got != size:
        return FileVerdict(path.name, False, f"size changed to {got} bytes while it was read", size)
    if range_bytes is None:  # format 1: the whole file's sha256, the one digest it has
        (digest,) = digests
        if digest != entry.get("sha256"):
            return FileVerdict(path.name, False, "sha256 differs from the manifest", size, digest)
        return FileVerdict(path.name, True, "ok", size, digest, contents)
    listed = entry.get("range_sha256")
    if digests != listed:
        bad = next(
            (i for i, (a, b) in enumerate(zip(digests, listed or [], strict=False)) if a != b),
            min(len(digests), len(listed or [])),
        )
        start = bad * range_bytes
        end = min(start + range_bytes, size)
        return FileVerdict(
            path.name,
            False,
            f"sha256 differs from the manifest in bytes {start}-{end} "
            f"(range {bad + 1} of {len(digests)})",
            size,
        )
    # The whole file's sha256 was not computed (the ranges were): none is reported as checked.
    return FileVerdict(path.name, True, "ok", size, None, contents)


def _verdict_reading(
    path: Path, entry: dict[str, Any], keep: bool, hashers: ThreadPoolExecutor
) -> FileVerdict:
    _reading.keep, _reading.hashers = keep, hashers
    try:
        return _file_verdict(path, entry)
    finally:
        _reading.keep, _reading.hashers = False, None


def _verdicts(
    path: Path, listed: dict[str, Any], names: list[str], keep: Iterable[str]
) -> list[FileVerdict]:
    """The verdicts of files ``names`` of ``path``, read in parallel, in that order; the
    ranges of every file hashed on one pool of HASHERS threads (made per call: a pool's
    threads do not survive a fork, and checkpoints are loaded in forked workers too)."""
    kept = set(keep)
    with ThreadPoolExecutor(HASHERS, "verify-sha256") as hashers:
        if len(names) <= 1:
            return [_verdict_reading(path / n, listed[n], n in kept, hashers) for n in names]
        with ThreadPoolExecutor(min(READERS, len(names)), "verify") as pool:
            jobs = [
                pool.submit(_verdict_reading, path / n, listed[n], n in kept, hashers)
                for n in sorted(names, key=lambda n: -_listed_size(listed[n]))  # largest first
            ]
            found = {job.result().name: job.result() for job in jobs}
    return [found[(path / n).name] for n in names]


def _listed_size(entry: Any) -> int:
    size = entry.get("size") if isinstance(entry, dict) else None
    return size if isinstance(size, int) else 0


def _model_header_problems(path: Path, manifest: dict[str, Any]) -> list[str]:
    try:
        cfg = LlamaConfig(**manifest["architecture"])
        expected = parameter_shapes(cfg)
    except (TypeError, ModelConfigError) as exc:
        return [f"{path.parent / MANIFEST_FILE}: architecture is not a valid model ({exc})"]
    try:
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            shapes = {n: tuple(fh.get_slice(n).get_shape()) for n in fh.keys()}  # noqa: SIM118
            dtypes = {fh.get_slice(n).get_dtype() for n in shapes}
    except (SafetensorError, OSError) as exc:
        return [f"{path}: safetensors header does not parse ({exc})"]
    problems = []
    params = sum(_numel(s) for s in shapes.values())
    if len(shapes) != manifest["tensor_count"]:
        problems.append(
            f"{path}: {len(shapes)} tensors, the manifest says {manifest['tensor_count']}"
        )
    if params != manifest["parameter_count"]:
        problems.append(
            f"{path}: {params} parameters, the manifest says {manifest['parameter_count']}"
        )
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    wrong = sorted(n for n in expected if n in shapes and shapes[n] != tuple(expected[n]))
    if missing or unexpected or wrong:
        problems.append(
            f"{path}: not the manifest's architecture (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}, wrong shape {wrong[:3]})"
        )
    names = {_DTYPES.get(d, d) for d in dtypes}
    if names and names != {manifest["dtype"]}:
        problems.append(f"{path}: dtypes {sorted(names)}, the manifest says {manifest['dtype']}")
    return problems


def _header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) of a safetensors file, from its header alone."""
    with safe_open(str(path), framework="pt", device="cpu") as fh:
        return {
            n: (fh.get_slice(n).get_dtype(), tuple(fh.get_slice(n).get_shape()))
            for n in fh.keys()  # noqa: SIM118
        }


#: AdamW's per-parameter state: moments of the parameter's shape, and a step count.
_MOMENTS = ("exp_avg", "exp_avg_sq")
_OPTIONAL_MOMENTS = ("max_exp_avg_sq",)  # amsgrad
_STEP_KEY = "step"


def _optimizer_problems(path: Path, manifest: dict[str, Any]) -> list[str]:
    """optimizer.safetensors against the architecture: a parameter's state is complete (its
    moments of its shape, a one-element step) or absent, for every parameter alike (a step
    taken updates them all), and no tensor belongs to no parameter. The loader would
    otherwise load a partial state that AdamW's next step dies on (KeyError)."""
    try:
        expected = parameter_shapes(LlamaConfig(**manifest["architecture"]))
    except (TypeError, ModelConfigError):
        return []  # the model check names the architecture
    try:
        header = _header(path)
    except (SafetensorError, OSError) as exc:
        return [f"{path}: safetensors header does not parse ({exc})"]
    problems: list[str] = []
    by_param: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {}
    stray = []
    for name, info in header.items():
        param, _, key = name.rpartition(".")
        if param in expected and key in (*_MOMENTS, *_OPTIONAL_MOMENTS, _STEP_KEY):
            by_param.setdefault(param, {})[key] = info
        else:
            stray.append(name)
    if stray:
        problems.append(f"{path}: tensors of no parameter: {', '.join(sorted(stray)[:3])}")
    for param in expected:
        state = by_param.get(param)
        if not state:
            if by_param:
                problems.append(f"{path}: no optimizer state for {param}")
            continue
        missing = [k for k in (*_MOMENTS, _STEP_KEY) if k not in state]
        if missing:
            problems.append(f"{path}: {param}: missing {', '.join(missing)}")
        for key, (_, shape) in state.items():
            want = (1,) if key == _STEP_KEY else expected[param]
            if (_numel(shape) != 1) if key == _STEP_KEY else (shape != want):
                problems.append(
                    f"{path}: {param}.{key} has shape {list(shape)}, expected {list(want)}"
                )
    return problems[:_REPORTED] + (
        [f"{path}: ... and {len(problems) - _REPORTED} more"] if len(problems) > _REPORTED else []
    )


_REPORTED = 5
_RNG_NAME = re.compile(r"^(?:rank\.(\d+)\.)?torch\.(cpu|cuda\.\d+)$")
#: Bytes of a CUDA generator's state (a Philox seed and offset, two 64-bit words).
_CUDA_STATE_BYTES = 16
#: rng.json and state.json hold a few generator states (5 KB each) per rank, some numbers.
_JSON_LIMIT = 64 * 1024 * 1024
#: The largest generator state read to be tried (a CPU one is 5056 bytes).
_RNG_STATE_LIMIT = 1024 * 1024


def _rng_tensor_problems(path: Path) -> tuple[list[str], set[int]]:
    """(problems, the ranks holding tensors) of rng.safetensors: every tensor a generator
    state that its generator takes (checked on a throwaway generator, never the process's)."""
    problems, ranks = [], set()
    try:
        header = _header(path)
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            tensors = {  # only what could be a generator state is read
                n: fh.get_tensor(n)
                for n, (_, shape) in header.items()
                if _numel(shape) <= _RNG_STATE_LIMIT
            }
    except (SafetensorError, OSError) as exc:
        return [f"{path}: not a readable safetensors file ({exc})"], set()
    for name in sorted(header):
        match = _RNG_NAME.match(name)
        if match is None:
            problems.append(f"{path}: {name!r} is not a generator this trainer saves")
            continue
        ranks.add(int(match.group(1) or 0))
        tensor = tensors.get(name)
        if tensor is None:
            problems.append(
                f"{path}: {name} holds {_numel(header[name][1])} values, no generator state"
            )
        elif tensor.dtype != torch.uint8:
            problems.append(f"{path}: {name} is {tensor.dtype}, a generator state is uint8")
        elif match.group(2) == "cpu":
            try:
                torch.Generator().set_state(tensor)
            except (RuntimeError, ValueError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                problems.append(
                    f"{path}: {name} ({tensor.numel()} bytes) is not a CPU generator state "
                    f"({reason})"
                )
        elif tensor.numel() != _CUDA_STATE_BYTES:
            problems.append(
                f"{path}: {name} holds {tensor.numel()} bytes, a CUDA generator state "
                f"{_CUDA_STATE_BYTES}"
            )
    if 0 not in ranks:
        problems.append(f"{path}: no torch.cpu generator state")
    return problems, ranks


def _generator_json_problems(states: Any, where: str) -> list[str]:
    """Whether Python's and NumPy's generators take ``states`` (throwaway generators)."""
    if not isinstance(states, dict):
        return [f"{where}: not an object"]
    problems = []
    try:
        py = states["python"]
        random.Random().setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        problems.append(f"{where}: no Python generator state ({type(exc).__name__}: {exc})")
    try:
        n = states["numpy"]
        np.random.RandomState().set_state(
            (
                n["kind"],
                np.asarray(n["keys"], dtype=np.uint32),
                n["pos"],
                n["has_gauss"],
                n["cached_gaussian"],
            )
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        problems.append(f"{where}: no NumPy generator state ({type(exc).__name__}: {exc})")
    return problems


def _read_json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(read_regular(path, _JSON_LIMIT).decode("utf-8")), None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{path}: not readable JSON ({exc})"


def _rng_problems(directory: Path) -> list[str]:
    """rng.safetensors and rng.json: every rank's generators, each one its generator takes."""
    problems, ranks = _rng_tensor_problems(directory / RNG_TENSOR_FILE)
    path = directory / RNG_JSON_FILE
    states, unreadable = _read_json(path)
    if unreadable:
        return [*problems, unreadable]
    problems += _generator_json_problems(states, str(path))
    if isinstance(states, dict):
        saved = states.get("ranks", {})
        if not isinstance(saved, dict):
            return [*problems, f"{path}: ranks is not an object"]
        for rank in sorted(ranks - {0}):
            if str(rank) not in saved:
                problems.append(f"{path}: no generator states of rank {rank}")
            else:
                problems += _generator_json_problems(saved[str(rank)], f"{path}: rank {rank}")
    return problems


def _state_problems(path: Path, step: int) -> list[str]:
    """state.json: the training state a resume loads (state.state_problems, the very check
    a resume's read makes), of the step the manifest (``step``) and the directory name say."""
    obj, unreadable = _read_json(path)
    if unreadable:
        return [unreadable]
    problems = state_problems(obj)
    if problems:
        return [f"{path}: {'; '.join(problems)}"]
    named = step_of(path.parent)
    if obj["step"] != step:
        says = f"its manifest and its name {path.parent.name}" if named == step else "its manifest"
        return [f"{path}: step {obj['step']}, but the checkpoint is step {step} ({says})"]
    if named is not None and obj["step"] != named:
        return [f"{path}: step {obj['step']}, but the directory is {path.parent.name}"]
    return []


def _content_problems(path: Path, manifest: dict[str, Any], ok: set[str]) -> list[str]:
    """What the files whose bytes match the manifest (``ok``) hold that a loader cannot use."""
    problems: list[str] = []
    if OPTIMIZER_FILE in ok:
        problems += _optimizer_problems(path / OPTIMIZER_FILE, manifest)
    if RNG_TENSOR_FILE in ok and RNG_JSON_FILE in ok:
        problems += _rng_problems(path)
    if CHECKPOINT_STATE_FILE in ok:
        problems += _state_problems(path / CHECKPOINT_STATE_FILE, manifest["step"])
    return problems


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _architecture_problems(manifest: dict[str, Any], expected: LlamaConfig) -> list[str]:
    saved = manifest["architecture"]
    wanted = dataclasses.asdict(expected)
    differ = [
        f"{k} {saved.get(k)!r} (expected {wanted[k]!r})"
        for k in sorted(set(saved) | set(wanted))
        if saved.get(k) != wanted.get(k)
    ]
    return [f"architecture differs: {'; '.join(differ)}"] if differ else []


def inspect_checkpoint(
    path: Path, *, architecture: LlamaConfig | None = None, keep: Iterable[str] = ()
) -> Inspection:
    """Every verdict on ``path``; ``Inspection.valid`` is True only when nothing is wrong.

    ``keep``: names of files the verdicts keep (``contents``: the verified bytes)
    when the whole checkpoint is valid, for a load to build its tensors over; dropped
    otherwise."""
    path = Path(path)
    report = Inspection(path)
    if not is_utf8_name(path):
        report.problems.append(
            f"{display(path)}: not a UTF-8 name; safetensors cannot open the files of a "
            "checkpoint there (rename the directory)"
        )
        return report
    if not path.is_dir():
        report.problems.append(f"{path}: not a directory")
        return report
    try:
        manifest = read_manifest(path)
    except CheckpointError as exc:
        report.problems.append(str(exc))
        return report
    report.manifest = manifest
    manifest_path = path / MANIFEST_FILE
    listed = manifest["files"]
    ours = [name for name in sorted(listed) if name in DATA_FILES]
    verdicts = iter(_verdicts(path, listed, ours, keep))
    for name in sorted(listed):
        if name not in DATA_FILES:
            report.problems.append(f"{manifest_path}: lists {name!r}, not a file of this format")
            continue
        verdict = next(verdicts)
        report.files.append(verdict)
        if not verdict.ok:
            report.problems.append(f"{path / name}: {verdict.reason}")
    for name in DATA_FILES:
        if name not in listed:
            report.problems.append(f"{manifest_path}: does not list {name}")
    for entry in sorted(path.iterdir()):
        if entry.name not in listed and entry.name != MANIFEST_FILE:
            report.problems.append(f"{entry}: unexpected file in a checkpoint; refusing it")
    if (path / MODEL_FILE).is_file() and all(v.ok for v in report.files if v.name == MODEL_FILE):
        report.problems.extend(_model_header_problems(path / MODEL_FILE, manifest))
    report.problems.extend(
        _content_problems(path, manifest, {v.name for v in report.files if v.ok})
    )
    named_step = step_of(path)
    if named_step is not None and named_step != manifest["step"]:
        report.problems.append(
            f"{manifest_path}: step {manifest['step']}, the directory is step {named_step}"
        )
    if architecture is not None:
        report.problems.extend(
            f"{manifest_path}: {p}" for p in _architecture_problems(manifest, architecture)
        )
    if report.problems:
        for verdict in report.files:
            verdict.contents = None  # nothing of an invalid checkpoint is loaded
    return report


def _refuse(path: Path, problems: list[str]) -> None:
    if problems:
        raise CheckpointError(f"{display(path)}: invalid checkpoint:\n  " + "\n  ".join(problems))


def verify_checkpoint(
    path: Path, *, architecture: LlamaConfig | None = None, keep: Iterable[str] = ()
) -> Inspection:
    """inspect_checkpoint, raising CheckpointError with every problem when there are any."""
    report = inspect_checkpoint(path, architecture=architecture, keep=keep)
    _refuse(path, report.problems)
    return report


def require_architecture(report: Inspection, architecture: LlamaConfig) -> None:
    """verify_checkpoint's refusal of a valid ``report`` (made without ``architecture``)
    whose architecture is not ``architecture``: the same message, no file read again."""
    if report.manifest is None or not report.valid:
        _refuse(report.path, report.problems or ["not verified"])
        return
    _refuse(
        report.path,
        [
            f"{report.path / MANIFEST_FILE}: {p}"
            for p in _architecture_problems(report.manifest, architecture)
        ],
    )
