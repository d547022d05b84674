"""What a run looks like now, read from its directory without changing anything in it.

    snap = take_snapshot(Path("runs/demo/train"))      # RunDirError when it is not a run
    snap.step, snap.last_step, snap.eta_s, snap.status, snap.alerts, snap.to_json()

Sources, all read-only (no file is created, locked or written; several monitors can watch
one run while it trains):

- ``training_state.json``: the run's last step and the latest record. The trainer replaces it
  atomically, so a reader sees the old file or the new one, never a part of either.
- the tail of ``metrics.jsonl`` (its last TAIL_BYTES): the series behind the sparklines
  and the medians. The trainer appends to it while we read, so a torn last line is
  expected and dropped; a bad line before the last is an error naming file:line, the
  trainer's own rule (trainer/runfiles/metrics_file.py).
- ``checkpoints/step-NNNNNNNN/``: the newest one holding its manifest (written last, so
  the directory is whole). Not the ``latest`` pointer: it is replaced after the rename,
  so for a moment it names the checkpoint before.
- ``run_manifest.json``'s mtime: when this launch started (it is written before step 1).

Every file is opened under the one read rule (gates/io/files.py open_regular): a FIFO, a
device or a socket in a file's place is a RunDirError saying which, never a read that
waits for a writer that never comes.

Status: how the run ended when training_state.json says so (the loop's end record,
MetricsWriter.finish: ``finished``, ``early_stopping``, ``signal``, ``alert``,
``aborted`` or ``save_failed``, with ``reason`` and ``ended_at``); else ``starting`` (no step yet),
``running``, ``finished`` (step == last step: runs written before the end record existed)
or ``stale`` (no update for more than STALE_FACTOR median steps, and at least
STALE_FLOOR_S: an evaluation or a checkpoint save pauses the steps for a while). A run
killed without a word (SIGKILL, power loss) has no end record: it turns stale.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gates.io.files import NotRegularFileError, open_regular
from trainer.checkpoint.layout import MANIFEST_FILE, checkpoint_dirs, step_of
from trainer.runfiles.metrics_file import MetricsFileError, parse_line
from trainer.runfiles.names import (
    CHECKPOINTS_DIR,
    METRICS_FILE,
    RUN_MANIFEST_FILE,
    TRAINING_STATE_FILE,
)
from trainer.runfiles.training_state import END_STATUSES, last_step_of

#: training_state.json holds one metrics record (a few KB); far more is not the trainer's.
STATE_LIMIT = 16 * 1024 * 1024
TAIL_BYTES = 256 * 1024  # ~1,200 metrics lines: enough for the series, cheap every refresh
SERIES = 60  # points in a sparkline
WINDOW = 20  # recent steps behind the medians (tokens/s, step time, grad norm)
STALE_FACTOR = 10.0
STALE_FLOOR_S = 60.0
SPIKE_FACTOR = 5.0  # a grad norm this many times the recent median is a spike
SPIKE_MIN_HISTORY = 5  # no median worth comparing against before this many steps


class RunDirError(ValueError):
    """RUN_DIR is not a run directory (or its state file is not JSON); names the path."""


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: str
    age_s: float


@dataclass(frozen=True)
class Alert:
    kind: str  # non_finite | grad_norm_spike | stale | val_loss_up | rule (monitoring.alerts)
    message: str


@dataclass(frozen=True)
class Snapshot:
    run_dir: str
    status: str
    step: int | None
    last_step: int | None  # the step this run ends at
    percent: float | None
    loss: float | None
    losses: list[float]
    lr: float | None
    lrs: list[float]
    grad_norm: float | None
    grad_norm_median: float | None
    tokens_per_s: float | None  # median of the last WINDOW steps
    step_s: float | None  # median of the last WINDOW steps
    eta_s: float | None
    elapsed_s: float | None
    updated_s_ago: float | None
    val_loss: float | None
    val_losses: list[list[float]]  # [step, val_loss] of each evaluation in the tail
    last_checkpoint: Checkpoint | None
    alerts: list[Alert]
    reason: str | None = None  # why the run ended (training_state.json), None while it runs
    ended_at: str | None = None  # when (UTC, ISO 8601)

    def to_json(self) -> dict:
        """The snapshot as strict JSON: NaN/inf become strings, as in metrics.jsonl."""
        return _strict(dataclasses.asdict(self))


def _strict(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def _number(value: object) -> float | None:
    """A metrics value as a float: the trainer writes NaN/inf as the strings 'nan'/'inf'."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _open(path: Path) -> BinaryIO:
    """``path`` open to read, if it is a regular file: RunDirError saying what it is
    otherwise (a FIFO, a device: their reads would wait or never end);
    FileNotFoundError when there is nothing."""
    try:
        return os.fdopen(open_regular(path), "rb")
    except IsADirectoryError:
        raise RunDirError(f"{path}: a directory, not a file") from None
    except NotRegularFileError as exc:  # a dangling symlink too: said so, not "missing"
        raise RunDirError(f"{path}: {exc.strerror}") from None


def _count_lines(path: Path, end: int) -> int:
    """Newlines in the first ``end`` bytes of ``path`` (only on the error path)."""
    count, done = 0, 0
    with _open(path) as fh:
        while done < end:
            chunk = fh.read(min(1 << 20, end - done))
            if not chunk:
                break
            count += chunk.count(b"\n")
            done += len(chunk)
    return count


def read_metrics_tail(path: Path, max_bytes: int = TAIL_BYTES) -> list[dict]:
    """The records of the last ``max_bytes`` of metrics.jsonl, oldest first; a torn last
    line is dropped, a bad line before it raises MetricsFileError naming file:line."""
    with _open(path) as fh:
        size = fh.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        fh.seek(start)
        data = fh.read(size - start)  # what is appended after this is the next refresh's
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # begins mid-line (or is a whole line we can spare)
    if lines and lines[-1] == b"":
        lines.pop()
    records = []
    for index, line in enumerate(lines):
        last = index == len(lines) - 1
        try:
            record = parse_line(line, index + 1, path, last)
        except MetricsFileError:
            # Name the line as the trainer would: count the lines before the tail.
            before = _count_lines(path, start) + (1 if start > 0 else 0)
            parse_line(line, before + index + 1, path, last)
            raise
        if record is not None:
            records.append(record)
    return records


def _read_state(path: Path) -> dict | None:
    try:
        with _open(path) as fh:
            raw = fh.read(STATE_LIMIT + 1)
    except FileNotFoundError:
        return None
    if len(raw) > STATE_LIMIT:
        raise RunDirError(f"{path}: more than {STATE_LIMIT} bytes; the trainer writes a few KB")
    try:
        state = json.loads(raw)
    except ValueError as exc:
        # The trainer replaces it atomically: a bad file was written by something else.
        raise RunDirError(f"{path}: not JSON ({exc})") from None
    if not isinstance(state, dict):
        raise RunDirError(f"{path}: not a JSON object")
    return state


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def last_checkpoint(run_dir: Path, now: float) -> Checkpoint | None:
    """The newest whole checkpoint under RUN_DIR/checkpoints (or RUN_DIR itself)."""
    for directory in (run_dir / CHECKPOINTS_DIR, run_dir):
        for path in checkpoint_dirs(directory):
            stamp = _mtime(path / MANIFEST_FILE)
            if stamp is not None:  # no manifest: being written, or not a checkpoint
                return Checkpoint(step=step_of(path) or 0, path=str(path), age_s=now - stamp)
    return None


def _median(values: list[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else None


def duration(seconds: float | None) -> str:
    """``3h 02m``, ``4m 05s``, ``12s``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _rule_alert(records: list[dict]) -> Alert | None:
    """The config's alert rules that fired (the loop's ``alerts`` entries): the newest
    step's, and on how many steps of the tail any fired."""
    fired = [r for r in records if isinstance(r.get("alerts"), list) and r["alerts"]]
    if not fired:
        return None
    newest = fired[-1]
    rules = "; ".join(
        f"{a.get('rule')} ({a.get('action')}, value {a.get('value')})"
        for a in newest["alerts"]
        if isinstance(a, dict)
    )
    more = f" (fired on {len(fired)} of the last {len(records)} steps)" if len(fired) > 1 else ""
    return Alert("rule", f"step {newest['step']}: {rules}{more}")


def _end_record(state: dict | None, path: Path) -> tuple[str, str, str | None] | None:
    """(status, reason, ended_at) of a run that recorded its end, else None."""
    if not state or "status" not in state:
        return None
    status = state["status"]
    if status not in END_STATUSES:
        raise RunDirError(
            f"{path}: status {status!r} is not one of {', '.join(END_STATUSES)}; "
            "the trainer writes no other"
        )
    reason, ended = state.get("reason"), state.get("ended_at")
    return status, str(reason or ""), ended if isinstance(ended, str) else None


def _alerts(
    records: list[dict], status: str, updated_ago: float | None, step_s: float | None
) -> list[Alert]:
    alerts = []
    for record in records[-SERIES:]:
        bad = [
            f"{key} {record.get(key)}"
            for key in ("loss", "grad_norm")
            if (v := _number(record.get(key))) is not None and not math.isfinite(v)
        ]
        if bad:
            alerts.append(Alert("non_finite", f"step {record['step']}: {', '.join(bad)}"))
            break  # the first one says when it started
    norms = [_number(r.get("grad_norm")) for r in records]
    before = [v for v in norms[-WINDOW - 1 : -1] if v is not None and math.isfinite(v)]
    if norms and norms[-1] is not None and len(before) >= SPIKE_MIN_HISTORY:
        median = statistics.median(before)
        if median > 0 and norms[-1] > SPIKE_FACTOR * median:
            alerts.append(
                Alert(
                    "grad_norm_spike",
                    f"step {records[-1]['step']}: grad norm {norms[-1]:.4g} is "
                    f"{norms[-1] / median:.1f}x the median {median:.4g} of the steps before",
                )
            )
    if status == "stale":
        median = f"{step_s:.3g} s" if step_s is not None else "unknown"
        alerts.append(
            Alert("stale", f"no update for {duration(updated_ago)} (median step {median})")
        )
    vals = [(r["step"], v) for r in records if (v := _number(r.get("val_loss"))) is not None]
    if len(vals) >= 2 and vals[-1][1] > vals[-2][1]:
        (s0, v0), (s1, v1) = vals[-2], vals[-1]
        alerts.append(
            Alert("val_loss_up", f"val loss rose {v0:.4f} (step {s0}) -> {v1:.4f} (step {s1})")
        )
    rule = _rule_alert(records)
    if rule is not None:
        alerts.append(rule)
    return alerts


def take_snapshot(run_dir: Path, *, now: float | None = None) -> Snapshot:
    """Read RUN_DIR's state as of ``now`` (default: the clock). Raises RunDirError when
    RUN_DIR is not a run directory, MetricsFileError on a damaged metrics.jsonl."""
    run_dir = Path(run_dir)
    now = time.time() if now is None else now
    if not run_dir.exists():
        raise RunDirError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory")
    state_path, metrics_path = run_dir / TRAINING_STATE_FILE, run_dir / METRICS_FILE
    state = _read_state(state_path)
    has_metrics = os.path.lexists(metrics_path)  # a FIFO there is refused by its read
    if state is None and not has_metrics:
        raise RunDirError(
            f"{run_dir}: not a run directory (neither {TRAINING_STATE_FILE} nor {METRICS_FILE}); "
            "a run writes them from its first step"
        )
    records = read_metrics_tail(metrics_path) if has_metrics else []
    last = state.get("last") if state else None
    if records and (not isinstance(last, dict) or records[-1]["step"] >= last.get("step", 0)):
        last = records[-1]  # metrics.jsonl is written just before the state file
    last_step = last_step_of(state) if state else None
    last_step = last_step if isinstance(last_step, int) and last_step > 0 else None
    step = last.get("step") if isinstance(last, dict) else None

    recent = records[-WINDOW:]
    step_s = _median([_number(r.get("step_s")) for r in recent])
    stamps = [t for t in (_mtime(state_path), _mtime(metrics_path)) if t is not None]
    updated_ago = now - max(stamps) if stamps else None
    ended = _end_record(state, state_path)
    if ended is not None:
        status = ended[0]  # the run said how it ended: never stale, never running
    elif step is None:
        status = "starting"
    elif last_step is not None and step >= last_step:
        status = "finished"
    elif updated_ago is not None and updated_ago > max(
        STALE_FACTOR * (step_s or 0.0), STALE_FLOOR_S
    ):
        status = "stale"
    else:
        status = "running"

    started = _mtime(run_dir / RUN_MANIFEST_FILE)
    if started is not None and stamps:
        elapsed = (max(stamps) if status in END_STATUSES else now) - started
    else:
        elapsed = sum(v for r in records if (v := _number(r.get("step_s"))) is not None) or None
    remaining = last_step - step if last_step is not None and step is not None else None
    # A run that ended before its last step has no time left to estimate.
    eta = remaining * step_s if remaining is not None and step_s is not None else None
    if ended is not None and status != "finished":
        eta = None
    series = records[-SERIES:]
    vals = [[r["step"], v] for r in records if (v := _number(r.get("val_loss"))) is not None]
    return Snapshot(
        run_dir=str(run_dir),
        status=status,
        step=step,
        last_step=last_step,
        percent=100.0 * step / last_step if remaining is not None else None,
        loss=_number(last.get("loss")) if isinstance(last, dict) else None,
        losses=[v for r in series if (v := _number(r.get("loss"))) is not None],
        lr=_number(last.get("lr")) if isinstance(last, dict) else None,
        lrs=[v for r in series if (v := _number(r.get("lr"))) is not None],
        grad_norm=_number(last.get("grad_norm")) if isinstance(last, dict) else None,
        grad_norm_median=_median([_number(r.get("grad_norm")) for r in recent]),
        tokens_per_s=_median([_number(r.get("tokens_per_s")) for r in recent]),
        step_s=step_s,
        eta_s=eta,
        elapsed_s=elapsed,
        updated_s_ago=updated_ago,
        val_loss=vals[-1][1] if vals else None,
        val_losses=vals,
        last_checkpoint=last_checkpoint(run_dir, now),
        alerts=_alerts(records, status, updated_ago, step_s),
        reason=ended[1] if ended else None,
        ended_at=ended[2] if ended else None,
    )
