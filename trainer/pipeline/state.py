"""What the pipeline has done in a run directory: pipeline.json, one record per stage (and
one, "summary", for the summary.json the last finished run wrote).

    state = PipelineState.load(run_dir)            # PipelineError when the file is damaged
    key = stage_key({"vocab_size": 8192, "corpus": corpus_sha})
    if state.done("tokenizer", key, run_dir): ...  # reuse: same inputs, outputs unchanged
    state.record("tokenizer", key, outputs={"tokenizer/tokenizer.json": sha}, seconds=6.1)

A stage is reused only when both hold: its key - the sha256 of its inputs (content hashes
of the files it reads, the options it was given and, for a stage that builds an artifact,
the trainer's own source: code_fingerprint) - equals the recorded one, and every
output it recorded still has the sha256 it had when the stage finished. Anything else
redoes the stage, and the stages after it see new input hashes and are redone in turn.
pipeline.json is replaced atomically after each stage, so a run killed mid-stage finds
the stages before it done and that one not done.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gates.io.files import canonical_sha256, sha256_file
from trainer import exit_codes
from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.names import PipelineDir
from trainer.userfiles import UserFileError, read_user_text

FORMAT = "shipgate-pipeline"
FORMAT_VERSION = 1


class PipelineError(RuntimeError):
    """A stage failed or the run directory cannot be used; the message names what.
    ``status``: the exit status `trainer pipeline` passes on (trainer/exit_codes.py: ABORTED,
    ALERT_STOPPED or SAVE_FAILED from the training stage, else FINDINGS)."""

    def __init__(self, message: str, *, status: int = exit_codes.FINDINGS) -> None:
        super().__init__(message)
        self.status = status


def files_fingerprint(paths: Iterable[Path]) -> tuple[str, int, int]:
    """(sha256 over each file's name and content sha256, files, bytes): a corpus by content."""
    digest, count, size = hashlib.sha256(), 0, 0
    for path in paths:
        content = sha256_file(path)
        digest.update(f"{Path(path).name}\0{content}\n".encode())
        count += 1
        size += Path(path).stat().st_size
    return digest.hexdigest(), count, size


#: What code_fingerprint reads: the package's code and the data files it ships and reads.
SOURCE_SUFFIXES = (".py", ".c", ".json")


def code_fingerprint(package: Path | None = None) -> str:
    """sha256 over every source file (.py, .c, and .json: the package data it reads, such as
    config/schema.json) of the trainer package (or ``package``, a directory), by path and
    content. An artifact is a function of the code that built it: with this in its key, a
    tokenizer or shards made by an edited or upgraded trainer are made again, never served
    from the run directory as if this code had made them."""
    root = Path(package) if package is not None else Path(__file__).resolve().parents[1]
    sources = (p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file())
    return canonical_sha256({p.relative_to(root).as_posix(): sha256_file(p) for p in sources})


def project_fingerprint(where: Path, *, outside: Path | None = None) -> str:
    """The code of the git work tree holding ``where``: its HEAD, its uncommitted changes
    to tracked files (the diff with full blob hashes, so binary files count by content) and
    every untracked file git does not ignore, by path and content - a new test module or
    measurement nobody committed yet counts as much as an edit. Files under ``outside`` (the
    pipeline's own run directory, when it lies in the project unignored) are left out: the
    run's outputs are not the code that measures them. Off git, or with an untracked file
    that cannot be read, the code cannot be told, so the key is one no other run has:
    measured again, never served from an earlier run."""
    never_again = f"the project's code cannot be told: measured again ({uuid.uuid4()})"
    git = ["git", "-C", str(where)]
    try:
        top, head = _git_out([*git, "rev-parse", "--show-toplevel", "HEAD"]).decode().splitlines()
        changes = _git_out([*git, "diff", "HEAD", "--full-index"])
        listed = _git_out([*git, "-C", top, "ls-files", "-z", "--others", "--exclude-standard"])
    except (OSError, ValueError, subprocess.SubprocessError):
        return never_again
    skip = Path(os.path.realpath(outside)) if outside is not None else None
    untracked = {}
    for name in sorted(n for n in listed.decode("utf-8", "surrogateescape").split("\0") if n):
        path = Path(top, name)  # top is git's resolved path: a symlink here is not followed
        if skip is not None and path.is_relative_to(skip):
            continue
        try:
            untracked[name] = f"-> {os.readlink(path)}" if path.is_symlink() else sha256_file(path)
        except OSError:
            return never_again
    return canonical_sha256(
        {"head": head, "changes": hashlib.sha256(changes).hexdigest(), "untracked": untracked}
    )


def _git_out(command: list[str]) -> bytes:
    return subprocess.run(command, capture_output=True, check=True, timeout=60).stdout


def stage_key(inputs: dict) -> str:
    """sha256 of the inputs as canonical JSON: equal inputs, equal key."""
    return canonical_sha256(inputs)


@dataclass
class PipelineState:
    path: Path
    stages: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, run_dir: Path) -> PipelineState:
        """The record in ``run_dir`` (empty when there is none); PipelineError naming the
        file for one that is not a regular file (a FIFO never blocks: the one read rule,
        trainer/userfiles.py), not JSON, or not shaped as this module writes it."""
        path = PipelineDir(run_dir).state
        if not os.path.lexists(path):
            return cls(path)
        afresh = "move it away (or the whole run directory) to start the pipeline afresh"
        try:
            data = json.loads(read_user_text(path))
        except UserFileError as exc:
            raise PipelineError(f"{exc}; {afresh}") from None
        except ValueError as exc:
            raise PipelineError(f"{path}: not readable as JSON ({exc}); {afresh}") from None
        if not isinstance(data, dict):
            raise PipelineError(f"{path}: not a {FORMAT} file (a JSON {_kind(data)}); {afresh}")
        if data.get("format") != FORMAT:
            raise PipelineError(f"{path}: not a {FORMAT} file (format {data.get('format')!r})")
        if data.get("format_version") != FORMAT_VERSION:
            raise PipelineError(
                f"{path}: format_version {data.get('format_version')!r}, this trainer reads "
                f"{FORMAT_VERSION}"
            )
        stages = data.get("stages")
        if not isinstance(stages, dict) or not all(
            isinstance(r, dict) and isinstance(r.get("outputs", {}), dict) for r in stages.values()
        ):
            raise PipelineError(f"{path}: 'stages' is not an object of stage records; {afresh}")
        return cls(path, stages)

    def claim(self) -> None:
        """Write the (empty) record now if there is none: the run directory is the
        pipeline's from its first stage on, even when that stage is killed."""
        if not os.path.lexists(self.path):
            self._save()

    def done(self, stage: str, key: str, run_dir: Path) -> bool:
        """Finished with these inputs, and its outputs are the bytes it left."""
        record = self.stages.get(stage)
        if not record or record.get("key") != key or record.get("status") != "done":
            return False
        for relative, sha in record.get("outputs", {}).items():
            path = Path(run_dir) / relative
            if not path.is_file() or sha256_file(path) != sha:
                return False
        return True

    def same_key(self, stage: str, key: str) -> bool:
        """Begun or finished with these inputs (a run to resume or to continue, say)."""
        record = self.stages.get(stage)
        return bool(record) and record.get("key") == key

    def made_exactly(self, stage: str, target: Path, run_dir: Path) -> bool:
        """Whether ``target`` holds exactly the files ``stage`` recorded under it, each
        with its recorded sha256, and nothing else (no other file, no symlink): then it is
        the pipeline's own and may be made again in its place."""
        record = self.stages.get(stage)
        if not record or record.get("status") != "done":
            return False
        run_dir, target = Path(run_dir), Path(target)
        prefix = target.relative_to(run_dir).as_posix()
        recorded = {
            rel: sha
            for rel, sha in record.get("outputs", {}).items()
            if rel == prefix or rel.startswith(prefix + "/")
        }
        if not recorded or target.is_symlink():
            return False
        entries = [target] if not target.is_dir() else list(target.rglob("*"))
        found = {}
        for entry in entries:
            if entry.is_symlink() or not (entry.is_file() or entry.is_dir()):
                return False
            if entry.is_file():
                found[entry.relative_to(run_dir).as_posix()] = entry
        return found.keys() == recorded.keys() and all(
            sha256_file(found[rel]) == sha for rel, sha in recorded.items()
        )

    def output(self, stage: str, name: str) -> str:
        return self.stages[stage]["results"][name]

    def result(self, stage: str, name: str) -> object:
        """A recorded result, None when the stage or the result is not recorded (a record
        written by an earlier version)."""
        return self.stages.get(stage, {}).get("results", {}).get(name)

    def mark_started(self, stage: str, key: str) -> None:
        self.stages[stage] = {"key": key, "status": "started", "started_at": _now()}
        self._save()

    def record(
        self,
        stage: str,
        key: str,
        *,
        outputs: dict[str, str],
        seconds: float,
        results: dict | None = None,
    ) -> None:
        self.stages[stage] = {
            "key": key,
            "status": "done",
            "finished_at": _now(),
            "seconds": round(seconds, 3),
            "outputs": outputs,
            "results": results or {},
        }
        self._save()

    def forget(self, stage: str) -> None:
        if self.stages.pop(stage, None) is not None:
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            self.path,
            {"format": FORMAT, "format_version": FORMAT_VERSION, "stages": self.stages},
        )


def _kind(value: object) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
