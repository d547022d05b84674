"""A run directory's files read back as the store's rows.

    files = read_run_dir(Path("runs/demo/train"))     # RunDirError, naming the path, if not
    files.run_id, files.run, files.params, files.metrics, files.artifacts, files.skipped

Sources (what `trainer apply --out DIR` writes):

- ``run_manifest.json``: the run's id (identity.py), name, config, seed, git, host, world.
- ``metrics.jsonl``: one row per step, read with the resume rule
  (trainer/runfiles/metrics_file.py parse_lines: a torn last line is left out, a bad line
  before it is an error naming the file and line); steps must increase (apply never
  appends a second run, resume drops the steps it takes again).
- ``training_state.json``: max_steps (the manifest's config when there is none yet) and,
  once the run has ended, how: status, reason, ended_at (MetricsWriter.finish).
- ``checkpoints/step-NNNNNNNN/manifest.json``: each file's digest (manifest.content_digest:
  its sha256, or in format 3 the sha256 of its range digests) and size as the save
  recorded them, checked against the size on disk but never re-hashed (a checkpoint can
  be many GB). A step directory without a readable manifest (a save cut short) is not a
  checkpoint: left out, with the reason in ``skipped``.
- ``export/``: every file, hashed (only when asked: `trainer runs sync`).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gates.io.files import canonical_sha256, read_regular, sha256_file
from trainer.checkpoint.layout import (
    MANIFEST_FILE,
    CheckpointError,
    checkpoint_dirs,
    step_of,
)
from trainer.checkpoint.manifest import content_digest
from trainer.checkpoint.manifest import read_manifest as read_checkpoint_manifest
from trainer.runfiles.metrics_file import MetricsFileError, parse_lines, read_run_file
from trainer.runfiles.names import (
    CHECKPOINTS_DIR,
    EXPORT_DIR,
    METRICS_FILE,
    RUN_MANIFEST_FILE,
    TRAINING_STATE_FILE,
)
from trainer.runfiles.training_state import END_STATUSES, last_step_of
from trainer.store.identity import IdentityError, identity_of
from trainer.store.schema import INTEGER_METRICS, METRIC_COLUMNS
from trainer.userfiles import display, is_utf8_name

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class RunDirError(ValueError):
    """A directory that is not a run directory, or whose files cannot be read as one; the
    message names the path (and line)."""


@dataclass(frozen=True)
class Artifact:
    kind: str  # checkpoint | export | file
    path: str  # relative to the run directory, with "/"
    sha256: str
    bytes: int
    step: int | None

    def row(self, run_id: str) -> tuple:
        return (run_id, self.kind, self.path, self.sha256, self.bytes, self.step)


@dataclass(frozen=True)
class RunFiles:
    run_dir: Path  # absolute
    run_id: str
    run: dict[str, Any]  # the runs row's columns the files know (not status, ended)
    params: list[tuple[str, str]]
    metrics: list[tuple]  # (step, *METRIC_COLUMNS, extra)
    artifacts: list[Artifact]
    end: EndRecord | None = None  # training_state.json's end record, once the run ended
    skipped: list[str] = field(default_factory=list)

    @property
    def last_step(self) -> int | None:
        return self.metrics[-1][0] if self.metrics else None


def check_run_dir(run_dir: Path) -> Path:
    """``run_dir`` made absolute; RunDirError unless it holds run_manifest.json and
    metrics.jsonl (what a run writes before and at its first step)."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise RunDirError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory (a run directory is a trainer apply --out)")
    for name in (RUN_MANIFEST_FILE, METRICS_FILE):
        # lexists: a FIFO or a directory in a file's place is named by its read, not
        # called missing
        if not os.path.lexists(run_dir / name):
            raise RunDirError(f"{run_dir}: not a run directory: no {name}")
    return run_dir.resolve()


#: run_manifest.json and training_state.json are a few KB each; far more is not a run's.
JSON_LIMIT = 16 * 1024 * 1024


def _read_json(path: Path) -> Any:
    """A run's JSON file, read under the one rule (gates.io.files.read_regular): a FIFO or a
    device in its place is a RunDirError saying which, never a read that waits or never
    ends."""
    try:
        return json.loads(read_regular(path, JSON_LIMIT).decode("utf-8"))
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{path}: not JSON ({exc})") from None


def read_run_manifest(run_dir: Path) -> tuple[dict[str, Any], str, str | None]:
    """(manifest, run id, first start) of ``run_dir``'s run_manifest.json."""
    path = Path(run_dir) / RUN_MANIFEST_FILE
    manifest = _read_json(path)
    if not isinstance(manifest, dict):
        raise RunDirError(f"{path}: not a JSON object")
    if not isinstance(manifest.get("config"), dict | None):
        raise RunDirError(f"{path}: config is not an object")
    try:
        run_id, started = identity_of(manifest, path)
    except IdentityError as exc:
        raise RunDirError(str(exc)) from None
    return manifest, run_id, started


def config_sha256(config: dict[str, Any] | None) -> str | None:
    """sha256 of the resolved config as canonical JSON, without its per-launch ``apply``
    section (output directory, device, resume): equal configs, equal hashes."""
    if config is None:
        return None
    body = {k: v for k, v in config.items() if k != "apply"}
    return canonical_sha256(body)


def flatten(config: dict[str, Any] | None, prefix: str = "") -> list[tuple[str, str]]:
    """The config as (dotted key, JSON value) pairs, sorted: ``optimizer.lr -> 0.003``.
    Lists are values (``[0.9, 0.95]``); an empty object is the value ``{}``."""
    if not config:
        return [(prefix[:-1], "{}")] if prefix else []
    pairs: list[tuple[str, str]] = []
    for key, value in config.items():
        if isinstance(value, dict):
            pairs += flatten(value, f"{prefix}{key}.")
        else:
            pairs.append((f"{prefix}{key}", json.dumps(value, sort_keys=True)))
    return sorted(pairs)


def _config_max_steps(config: dict[str, Any] | None) -> int | None:
    if not config:
        return None
    apply = config.get("apply") or {}
    # `trainer apply --stop-after` (manifests before the name was given one meaning:
    # apply.max_steps)
    override = apply.get("stop_after", apply.get("max_steps"))
    planned = (config.get("training") or {}).get("max_steps")
    value = override if override is not None else planned
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_columns(run_dir: Path, manifest: dict[str, Any], started: str | None) -> dict[str, Any]:
    """The runs row's columns that run_manifest.json gives."""
    config = manifest.get("config")
    git = manifest.get("git") if isinstance(manifest.get("git"), dict) else {}
    host = manifest.get("host") if isinstance(manifest.get("host"), dict) else {}
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), dict) else {}
    name = config.get("name") if config else None
    return {
        "name": name if isinstance(name, str) and name else Path(run_dir).name,
        "run_dir": str(run_dir),
        "started": started,
        "launched": manifest.get("created"),
        "git_commit": git.get("commit"),
        "git_dirty": git.get("dirty"),
        "config_sha256": config_sha256(config),
        "data_manifest_sha256": manifest.get("data_manifest_sha256"),
        "seed": manifest.get("seed"),
        "world_size": manifest.get("world_size"),
        "device": manifest.get("device"),
        "host": host.get("name"),
        "trainer_version": versions.get("trainer"),
        "max_steps": _config_max_steps(config),
    }


def _number(record: dict, key: str, where: str) -> float | int | None:
    value = record.get(key)
    if value is None:
        return None
    if key in INTEGER_METRICS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RunDirError(f"{where}: {key} is not an integer: {value!r}")
        return value
    if isinstance(value, str) and value in _NON_FINITE:
        value = _NON_FINITE[value]  # how metrics.jsonl writes what JSON cannot hold
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunDirError(f"{where}: {key} is not a number: {value!r}")
    return float(value)  # NaN becomes NULL in SQLite, which has none


def metric_row(record: dict, where: str) -> tuple:
    """(step, *METRIC_COLUMNS, extra JSON or None) of one metrics record; RunDirError
    naming ``where`` for a value of the wrong type or a record without a loss."""
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise RunDirError(f"{where}: no integer step")
    if record.get("loss") is None:
        raise RunDirError(f"{where}: no loss")
    values = tuple(_number(record, key, where) for key in METRIC_COLUMNS)
    rest = {k: v for k, v in record.items() if k != "step" and k not in METRIC_COLUMNS}
    return (step, *values, json.dumps(rest, sort_keys=True) if rest else None)


def read_metric_rows(path: Path) -> list[tuple]:
    """metric_row of every record of a metrics.jsonl, steps increasing."""
    path = Path(path)
    try:
        pairs = parse_lines(read_run_file(path), path)
    except MetricsFileError as exc:
        raise RunDirError(str(exc)) from None
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from None
    rows: list[tuple] = []
    for number, (_, record) in enumerate(pairs, 1):  # only a torn last line is left out
        row = metric_row(record, f"{path}: line {number}")
        if rows and row[0] <= rows[-1][0]:
            raise RunDirError(f"{path}: line {number}: step {row[0]} after step {rows[-1][0]}")
        rows.append(row)
    return rows


def _relative(path: Path, run_dir: Path) -> str:
    return Path(os.path.relpath(path, run_dir)).as_posix()


def _checkpoint(directory: Path, run_dir: Path) -> list[Artifact]:
    """The artifacts of one checkpoint directory, from its manifest; CheckpointError if it
    is not a whole checkpoint (no manifest, a file missing or of another size)."""
    manifest = read_checkpoint_manifest(directory)
    step = step_of(directory)
    if manifest["step"] != step:
        raise CheckpointError(f"{directory / MANIFEST_FILE}: says step {manifest['step']}")
    files = manifest["files"]
    if not isinstance(files, dict):
        raise CheckpointError(f"{directory / MANIFEST_FILE}: files is not an object")
    found = []
    for name, entry in sorted(files.items()):
        # read_checkpoint_manifest checked every entry's form for its format version
        sha, size = content_digest(entry), entry["size"]
        if not (isinstance(sha, str) and _SHA256.match(sha) and isinstance(size, int)):
            raise CheckpointError(f"{directory / MANIFEST_FILE}: bad entry for {name}")
        path = directory / name
        actual = path.stat().st_size if path.is_file() else None
        if actual != size:
            why = "missing" if actual is None else f"{actual} bytes, the manifest says {size}"
            raise CheckpointError(f"{path}: {why}")
        found.append(Artifact("checkpoint", _relative(path, run_dir), sha, size, step))
    manifest_path = directory / MANIFEST_FILE
    found.append(
        Artifact(
            "checkpoint",
            _relative(manifest_path, run_dir),
            sha256_file(manifest_path),
            manifest_path.stat().st_size,
            step,
        )
    )
    return found


def checkpoint_artifacts(run_dir: Path, root: Path) -> tuple[list[Artifact], list[str]]:
    """(artifacts of every whole checkpoint under ``root``, oldest first; why each other
    step directory was left out)."""
    artifacts: list[Artifact] = []
    skipped: list[str] = []
    for directory in reversed(checkpoint_dirs(root)):
        try:
            artifacts += _checkpoint(directory, run_dir)
        except (CheckpointError, OSError) as exc:
            skipped.append(f"{_relative(directory, run_dir)}: {exc}")
    return artifacts, skipped


def export_artifacts(run_dir: Path) -> list[Artifact]:
    """Every file under ``run_dir/export``, hashed (an export has no manifest)."""
    root = Path(run_dir) / EXPORT_DIR
    if not root.is_dir():
        return []
    return [
        Artifact("export", _relative(p, run_dir), sha256_file(p), p.stat().st_size, None)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ]


def manifest_artifact(run_dir: Path) -> Artifact:
    path = Path(run_dir) / RUN_MANIFEST_FILE
    return Artifact("file", RUN_MANIFEST_FILE, sha256_file(path), path.stat().st_size, None)


@dataclass(frozen=True)
class EndRecord:
    """How a run ended, as training_state.json says (MetricsWriter.finish)."""

    status: str
    reason: str | None
    ended: str | None


def read_state(run_dir: Path) -> tuple[int | None, EndRecord | None]:
    """(max_steps, the end record) of training_state.json; (None, None) when there is no
    such file yet, and no end record while the run is going (or was killed)."""
    path = Path(run_dir) / TRAINING_STATE_FILE
    if not os.path.lexists(path):
        return None, None
    state = _read_json(path)  # a FIFO or a directory in its place: refused, saying which
    if not isinstance(state, dict):
        raise RunDirError(f"{path}: not a JSON object")
    max_steps = last_step_of(state)
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)):
        raise RunDirError(f"{path}: last_step is not an integer: {max_steps!r}")
    status = state.get("status")
    if status is None:
        return max_steps, None
    if status not in END_STATUSES:
        raise RunDirError(f"{path}: status {status!r} is not one of {', '.join(END_STATUSES)}")
    reason, ended = state.get("reason"), state.get("ended_at")
    if not isinstance(reason, str | None) or not isinstance(ended, str | None):
        raise RunDirError(f"{path}: reason and ended_at are strings")
    return max_steps, EndRecord(status, reason, ended)


def read_run_dir(run_dir: Path, *, exports: bool = False) -> RunFiles:
    """Everything the store holds about the run in ``run_dir``, read from its files;
    ``exports``: hash the files of ``export/`` too. RunDirError naming the path if it is no
    run directory or a file cannot be trusted."""
    run_dir = check_run_dir(run_dir)
    manifest, run_id, started = read_run_manifest(run_dir)
    run = run_columns(run_dir, manifest, started)
    max_steps, end = read_state(run_dir)
    if max_steps is not None:
        run["max_steps"] = max_steps
    metrics = read_metric_rows(run_dir / METRICS_FILE)
    try:
        artifacts, skipped = checkpoint_artifacts(run_dir, run_dir / CHECKPOINTS_DIR)
        artifacts.append(manifest_artifact(run_dir))
        if exports:
            artifacts += export_artifacts(run_dir)
    except OSError as exc:
        raise RunDirError(f"{run_dir}: cannot read: {exc}") from None
    params = flatten(manifest.get("config"))
    _require_utf8_text(run_dir, run, params, artifacts)
    return RunFiles(
        run_dir=run_dir,
        run_id=run_id,
        run=run,
        params=params,
        metrics=metrics,
        artifacts=artifacts,
        end=end,
        skipped=skipped,
    )


def utf8_dir_problem(run_dir: Path) -> str | None:
    """Why the run store cannot record ``run_dir`` (None: it can): a name of bytes that are
    not UTF-8 (a lone surrogate in Python's str), which SQLite's TEXT cannot hold."""
    if is_utf8_name(run_dir):
        return None
    return (
        f"{display(run_dir)}: not a UTF-8 name; the run store records run directories as "
        "UTF-8 text: rename the directory, then sync it"
    )


def _require_utf8_text(
    run_dir: Path, run: dict[str, Any], params: list[tuple[str, str]], artifacts: list[Artifact]
) -> None:
    """RunDirError naming the file and field of the first text the store cannot hold: a
    lone surrogate (a non-UTF-8 byte in a name, or a "\\udcff" escape in the manifest's
    JSON) that SQLite would refuse half-way through a sync with a UnicodeEncodeError."""
    problem = utf8_dir_problem(run_dir)
    if problem:
        raise RunDirError(problem)
    manifest = run_dir / RUN_MANIFEST_FILE
    for key, value in run.items():
        if isinstance(value, str) and not is_utf8_name(value):
            raise RunDirError(
                f'{manifest}: {key} "{display(value)}" holds a lone surrogate, not UTF-8 '
                "text; the run store cannot record it"
            )
    for key, _ in params:
        if not is_utf8_name(key):
            raise RunDirError(
                f'{manifest}: config key "{display(key)}" holds a lone surrogate, not UTF-8 '
                "text; the run store cannot record it"
            )
    for artifact in artifacts:
        if not is_utf8_name(artifact.path):
            raise RunDirError(
                f"{display(run_dir / artifact.path)}: not a UTF-8 name; the run store records "
                "file names as UTF-8 text: rename it, then sync"
            )
