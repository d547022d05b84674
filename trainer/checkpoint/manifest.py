"""manifest.json: what a checkpoint claims to hold, written after everything it describes.

{"format": "shipgate-checkpoint", "format_version": 3, "step": 15,
 "files": {"model.safetensors": {"size": 1234, "range_bytes": 67108864,
                                 "range_sha256": ["...", ...]}, ...},
 "tensor_count": 21, "parameter_count": 158016, "dtype": "float32",
 "architecture": {...LlamaConfig fields...}}

``range_sha256`` is the sha256 of each ``range_bytes`` range of the file in order, the last
one shorter (an empty file has one range, empty). They cover every byte; the save computes
them on every core while it writes (trainer/checkpoint/durable.py) and a loader verifies them
on every core (trainer/checkpoint/verify.py). There is no whole-file sha256 since format 3
(issue 35): a second digest of every byte was the save's bound on a two-core machine with a
fast disk, and one sha256 stream over a 3 GB optimizer file is one core's work. A tool
outside the trainer that wants one identity per file takes ``content_digest`` (the sha256
of the range list, which fixes the bytes as firmly), or checks the ranges itself: each is a
plain sha256 of a slice of the file. Format 2 entries also hold the
whole file's ``sha256``; format 1 entries hold only that. Both are still read and verified.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gates.io.files import CHUNK_BYTES, open_regular, read_regular
from trainer.checkpoint.layout import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_FILE,
    READABLE_FORMAT_VERSIONS,
    CheckpointError,
)

#: Bytes per range digest: 70 ranges for a 370M model's optimizer file, each a few tens of
#: milliseconds of one core's sha256, so the ranges spread over the cores evenly.
RANGE_BYTES = 64 * 1024 * 1024
#: Threads hashing ranges, in a save and in a load: one per core (hashlib releases the GIL).
HASHERS = max(2, os.cpu_count() or 1)


def range_count(size: int, range_bytes: int) -> int:
    """How many ranges a file of ``size`` bytes has (an empty file one)."""
    return max(1, -(-size // range_bytes))


def pieces_by_range(
    chunks: Iterable[bytes | memoryview], range_bytes: int
) -> Iterator[tuple[memoryview, list[tuple[memoryview, bool]]]]:
    """Each chunk in order (as a byte view) with its pieces, cut at range boundaries, each
    flagged True when it ends its range; then an empty chunk with the last range's end (an
    empty piece, flagged True) when a shorter last range is open or no byte came (an empty
    file has one range, empty). The one place a file is cut into ranges: a save hashes the
    ranges of what it writes (cut_into_ranges, trainer/checkpoint/durable.py), bytes_entry
    and file_entry those of what they are given, piece by piece."""
    in_range = 0
    seen = False
    for raw in chunks:
        chunk = memoryview(raw).cast("B")
        pieces, view = [], chunk
        while view:
            take = min(len(view), range_bytes - in_range)
            in_range = (in_range + take) % range_bytes
            pieces.append((view[:take], in_range == 0))
            view, seen = view[take:], True
        yield chunk, pieces
    if in_range or not seen:
        yield memoryview(b""), [(memoryview(b""), True)]


def cut_into_ranges(
    chunks: Iterable[bytes | memoryview], range_bytes: int
) -> Iterator[tuple[memoryview, list[list[memoryview]]]]:
    """Each chunk in order with the ranges it completes, each range the list of its pieces
    (views of the chunks: a range is held until it is complete; pieces_by_range)."""
    pieces: list[memoryview] = []
    for chunk, cut in pieces_by_range(chunks, range_bytes):
        done = []
        for piece, ends_range in cut:
            pieces.append(piece)
            if ends_range:
                done.append(pieces)
                pieces = []
        yield chunk, done


def sha256_of(pieces: list[memoryview]) -> str:
    """The sha256 of ``pieces`` one after another (one range)."""
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    return digest.hexdigest()


def entry_of(size: int, range_bytes: int, digests: list[str]) -> dict[str, Any]:
    """A manifest entry: the file's size and the sha256 of each of its ranges."""
    return {"size": size, "range_bytes": range_bytes, "range_sha256": digests}


def _entry_of_chunks(
    chunks: Iterable[bytes | memoryview], range_bytes: int | None = None
) -> dict[str, Any]:
    """The entry of the bytes of ``chunks``, each hashed as it comes (no chunk is kept)."""
    range_bytes = range_bytes or RANGE_BYTES  # looked up now: tests set it smaller
    size, digests, digest = 0, [], hashlib.sha256()
    for chunk, cut in pieces_by_range(chunks, range_bytes):  # no range is held in memory
        size += chunk.nbytes
        for piece, ends_range in cut:
            digest.update(piece)
            if ends_range:
                digests.append(digest.hexdigest())
                digest = hashlib.sha256()
    return entry_of(size, range_bytes, digests)


def bytes_entry(data: bytes | memoryview) -> dict[str, Any]:
    """The manifest entry of ``data``."""
    return _entry_of_chunks([data])


def file_entry(path: Path) -> dict[str, Any]:
    """The manifest entry of the file at ``path``, read from disk. Only a regular file is
    read (gates.io.files.open_regular: a FIFO planted in a checkpoint would never end)."""
    with os.fdopen(open_regular(path), "rb") as fh:
        return _entry_of_chunks(iter(lambda: fh.read(CHUNK_BYTES), b""))


def content_digest(entry: dict[str, Any]) -> str:
    """One sha256 that names a listed file's bytes, for tools outside the trainer (the run
    store): the whole file's sha256 where the entry has one (formats 1 and 2), else the
    sha256 of its range size and range digests as text ("67108864\n<hex>\n<hex>\n..."),
    which fixes the bytes as firmly and costs no pass over them."""
    if "sha256" in entry:
        return entry["sha256"]
    text = "".join(f"{line}\n" for line in (entry["range_bytes"], *entry["range_sha256"]))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _entry(path: Path, known: dict[str, Any] | None) -> dict[str, Any]:
    """``known`` (the entry of the bytes written, hashed as they were written:
    trainer/checkpoint/durable.py) when the file still has that size; else hashed from disk."""
    if known is not None and path.stat().st_size == known["size"]:
        return dict(known)
    return file_entry(path)


def build_manifest(
    directory: Path,
    files: list[str],
    *,
    step: int,
    architecture: dict[str, Any],
    tensor_count: int,
    parameter_count: int,
    dtype: str,
    entries: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The manifest of ``files`` as written: ``entries`` holds the sha256 and size each
    writer computed from the bytes it wrote; a file without one is hashed from disk."""
    entries = entries or {}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": step,
        "files": {name: _entry(directory / name, entries.get(name)) for name in files},
        "tensor_count": tensor_count,
        "parameter_count": parameter_count,
        "dtype": dtype,
        "architecture": architecture,
    }


_KEYS = (
    "format",
    "format_version",
    "step",
    "files",
    "tensor_count",
    "parameter_count",
    "dtype",
    "architecture",
)


def read_manifest(directory: Path) -> dict[str, Any]:
    """The parsed manifest of ``directory``; CheckpointError naming the file otherwise."""
    path = directory / MANIFEST_FILE
    try:
        data = read_regular(path, MANIFEST_LIMIT)  # a FIFO or a device: refused, not read
    except FileNotFoundError:
        raise CheckpointError(
            f"{path}: missing; a directory without a manifest is not a checkpoint"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    missing = [k for k in _KEYS if k not in manifest]
    if missing:
        raise CheckpointError(f"{path}: missing {', '.join(missing)}")
    version = manifest["format_version"]
    if (
        manifest["format"] != FORMAT
        or isinstance(version, bool)
        or version not in READABLE_FORMAT_VERSIONS
    ):
        *earlier, last = READABLE_FORMAT_VERSIONS
        readable = f"{', '.join(str(v) for v in earlier)} and {last}"
        raise CheckpointError(
            f"{path}: format {manifest['format']!r} version {version!r}; "
            f"this trainer reads {FORMAT!r} versions {readable}"
        )
    wrong = _type_problems(manifest)
    if wrong:
        raise CheckpointError(f"{path}: {'; '.join(wrong)}")
    return manifest


#: A manifest lists six files and an architecture: a few KB. Anything near this is not one.
MANIFEST_LIMIT = 1024 * 1024

#: The JSON type each field must have (bool is refused where a number is meant).
_TYPES: dict[str, tuple[type, str]] = {
    "step": (int, "an integer"),
    "files": (dict, "an object"),
    "tensor_count": (int, "an integer"),
    "parameter_count": (int, "an integer"),
    "dtype": (str, "a string"),
    "architecture": (dict, "an object"),
}


def _type_problems(manifest: dict[str, Any]) -> list[str]:
    """What in a parsed manifest has the wrong JSON type: a field, or a ``files`` entry that
    is not what its format lists (the verifier reads them as such): {"size", "range_bytes",
    "range_sha256"} (3), those and "sha256" (2), {"sha256", "size"} (1)."""
    problems = [
        f"{key} is {json.dumps(manifest[key])[:40]}, not {words}"
        for key, (kind, words) in _TYPES.items()
        if not isinstance(manifest[key], kind) or isinstance(manifest[key], bool)
    ]
    files, version = manifest["files"], manifest["format_version"]
    if isinstance(files, dict):
        for name, entry in sorted(files.items()):
            whole = version < 3
            if not (
                isinstance(entry, dict)
                and _whole_number(entry.get("size"))
                and (isinstance(entry.get("sha256"), str) or not whole)
            ):
                shape = '"sha256": "<hex>", "size": <bytes>' if whole else '"size": <bytes>'
                problems.append(
                    f"files entry {name!r} is {json.dumps(entry)[:60]}, not {{{shape}, ...}}"
                )
            elif version >= 3 and set(entry) != _FORMAT_3_KEYS:
                problems.append(
                    f"files entry {name!r} has keys {sorted(entry)}, "
                    f"a format 3 entry has {sorted(_FORMAT_3_KEYS)}"
                )
            elif version >= 2:
                problems += _range_problems(name, entry)
    return problems


#: A format 3 entry, exactly: a "sha256" there would be a digest nothing verifies.
_FORMAT_3_KEYS = {"size", "range_bytes", "range_sha256"}
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
#: The smallest range a manifest may name: smaller ones would only make its list long.
MIN_RANGE_BYTES = 1024 * 1024


def _range_problems(name: str, entry: dict[str, Any]) -> list[str]:
    """A format 2 or 3 entry's ranges: a range size, and one sha256 per range of its size."""
    range_bytes, digests = entry.get("range_bytes"), entry.get("range_sha256")
    if not _whole_number(range_bytes) or range_bytes < MIN_RANGE_BYTES:
        return [
            f"files entry {name!r}: range_bytes is {json.dumps(range_bytes)[:40]}, "
            f"not a whole number of at least {MIN_RANGE_BYTES}"
        ]
    if not isinstance(digests, list) or not all(
        isinstance(d, str) and _HEX_DIGEST.fullmatch(d) for d in digests
    ):
        return [f"files entry {name!r}: range_sha256 is not a list of sha256 hex digests"]
    want = range_count(entry["size"], range_bytes)
    if len(digests) != want:
        return [
            f"files entry {name!r}: {len(digests)} range digests, but {entry['size']} bytes "
            f"in ranges of {range_bytes} make {want}"
        ]
    return []


def _whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
