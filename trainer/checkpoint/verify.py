"""Whether a checkpoint's bytes are what its manifest says: the one gate before any load.

    report = inspect_checkpoint(path)           # every verdict, never raises on bad data
    report.valid, report.problems, report.files
    verify_checkpoint(path, architecture=cfg)   # CheckpointError listing every problem

Checked: manifest present and readable; every listed file present with its size and
sha256; every file of the format listed and no other file in the directory (a planted
``.pt`` is refused, never ignored); the model file's header holds the architecture's
tensors (names, shapes, count, parameter count, dtype); the step matches the directory
name; and, when asked, the architecture is the expected one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from gates.files import sha256_file
from trainer.checkpoint.layout import (
    DATA_FILES,
    MANIFEST_FILE,
    MODEL_FILE,
    CheckpointError,
    step_of,
)
from trainer.checkpoint.manifest import read_manifest
from trainer.model.config import LlamaConfig, ModelConfigError
from trainer.model.params import parameter_shapes

_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


@dataclass
class FileVerdict:
    name: str
    ok: bool
    reason: str  # "ok", or what is wrong
    size: int | None = None
    sha256: str | None = None


@dataclass
class Inspection:
    path: Path
    manifest: dict[str, Any] | None = None
    files: list[FileVerdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

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
            "files": [dataclasses.asdict(v) for v in self.files],
            "problems": list(self.problems),
        }


def _file_verdict(path: Path, entry: dict[str, Any]) -> FileVerdict:
    """Size first (a truncated file), then sha256 (a flipped byte)."""
    if not path.is_file():
        return FileVerdict(path.name, False, "listed in the manifest but missing")
    size = path.stat().st_size
    if size != entry.get("size"):
        return FileVerdict(
            path.name, False, f"size {size} bytes, the manifest says {entry.get('size')}", size
        )
    digest = sha256_file(path)
    if digest != entry.get("sha256"):
        return FileVerdict(path.name, False, "sha256 differs from the manifest", size, digest)
    return FileVerdict(path.name, True, "ok", size, digest)


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


def inspect_checkpoint(path: Path, *, architecture: LlamaConfig | None = None) -> Inspection:
    """Every verdict on ``path``; ``Inspection.valid`` is True only when nothing is wrong."""
    path = Path(path)
    report = Inspection(path)
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
    for name in sorted(listed):
        if name not in DATA_FILES:
            report.problems.append(f"{manifest_path}: lists {name!r}, not a file of this format")
            continue
        verdict = _file_verdict(path / name, listed[name])
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
    named_step = step_of(path)
    if named_step is not None and named_step != manifest["step"]:
        report.problems.append(
            f"{manifest_path}: step {manifest['step']}, the directory is step {named_step}"
        )
    if architecture is not None:
        report.problems.extend(
            f"{manifest_path}: {p}" for p in _architecture_problems(manifest, architecture)
        )
    return report


def verify_checkpoint(path: Path, *, architecture: LlamaConfig | None = None) -> Inspection:
    """inspect_checkpoint, raising CheckpointError with every problem when there are any."""
    report = inspect_checkpoint(path, architecture=architecture)
    if not report.valid:
        raise CheckpointError(f"{path}: invalid checkpoint:\n  " + "\n  ".join(report.problems))
    return report
