"""What the pipeline has done in a run directory: pipeline.json, one record per stage.

    state = PipelineState.load(run_dir)            # PipelineError when the file is damaged
    key = stage_key({"vocab_size": 8192, "corpus": corpus_sha})
    if state.done("tokenizer", key, run_dir): ...  # reuse: same inputs, outputs unchanged
    state.record("tokenizer", key, outputs={"tokenizer/tokenizer.json": sha}, seconds=6.1)

A stage is reused only when both hold: its key - the sha256 of its inputs (content hashes
of the files it reads and the options it was given) - equals the recorded one, and every
output it recorded still has the sha256 it had when the stage finished. Anything else
redoes the stage, and the stages after it see new input hashes and are redone in turn.
pipeline.json is replaced atomically after each stage, so a run killed mid-stage finds
the stages before it done and that one not done.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gates.files import sha256_file
from trainer import exit_codes
from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.names import PipelineDir

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


def stage_key(inputs: dict) -> str:
    """sha256 of the inputs as canonical JSON: equal inputs, equal key."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class PipelineState:
    path: Path
    stages: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, run_dir: Path) -> PipelineState:
        path = PipelineDir(run_dir).state
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PipelineError(
                f"{path}: not readable as JSON ({exc}); move it away (or the whole run "
                "directory) to start the pipeline afresh"
            ) from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PipelineError(f"{path}: not a {FORMAT} file (format {data.get('format')!r})")
        if data.get("format_version") != FORMAT_VERSION:
            raise PipelineError(
                f"{path}: format_version {data.get('format_version')!r}, this trainer reads "
                f"{FORMAT_VERSION}"
            )
        stages = data.get("stages")
        if not isinstance(stages, dict):
            raise PipelineError(f"{path}: 'stages' is not an object")
        return cls(path, stages)

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

    def started(self, stage: str, key: str) -> bool:
        """Begun with these inputs and not finished (a run to resume, say)."""
        record = self.stages.get(stage)
        return bool(record) and record.get("key") == key and record.get("status") == "started"

    def output(self, stage: str, name: str) -> str:
        return self.stages[stage]["results"][name]

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


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
