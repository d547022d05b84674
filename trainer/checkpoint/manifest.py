"""manifest.json: what a checkpoint claims to hold, written after everything it describes.

{"format": "shipgate-checkpoint", "format_version": 1, "step": 15,
 "files": {"model.safetensors": {"sha256": "...", "size": 1234}, ...},
 "tensor_count": 21, "parameter_count": 158016, "dtype": "float32",
 "architecture": {...LlamaConfig fields...}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gates.files import read_regular, sha256_file
from trainer.checkpoint.layout import FORMAT, FORMAT_VERSION, MANIFEST_FILE, CheckpointError


def file_entry(path: Path) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "size": path.stat().st_size}


def _entry(path: Path, known: dict[str, Any] | None) -> dict[str, Any]:
    """``known`` (the sha256 and size of the bytes written, hashed as they were written:
    trainer/checkpoint/durable.py) when the file still has that size; else hashed from disk."""
    if known is not None and path.stat().st_size == known["size"]:
        return {"sha256": known["sha256"], "size": known["size"]}
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
    if manifest["format"] != FORMAT or manifest["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: format {manifest['format']!r} version {manifest['format_version']!r}; "
            f"this trainer reads {FORMAT!r} version {FORMAT_VERSION}"
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
    """What in a parsed manifest has the wrong JSON type: a field, or a ``files`` entry
    that is not {"sha256": string, "size": integer} (the verifier reads them as such)."""
    problems = [
        f"{key} is {json.dumps(manifest[key])[:40]}, not {words}"
        for key, (kind, words) in _TYPES.items()
        if not isinstance(manifest[key], kind) or isinstance(manifest[key], bool)
    ]
    files = manifest["files"]
    if isinstance(files, dict):
        for name, entry in sorted(files.items()):
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("sha256"), str)
                and isinstance(entry.get("size"), int)
                and not isinstance(entry.get("size"), bool)
            ):
                problems.append(
                    f"files entry {name!r} is {json.dumps(entry)[:60]}, "
                    'not {"sha256": "<hex>", "size": <bytes>}'
                )
    return problems
