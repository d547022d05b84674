"""training_state.json, a run's latest state: how it is written; torch-free.

    write_progress(run.training_state, last_step=1000, last=line)    # every step
    write_end(run.training_state, "finished", "last_step", ended=now, last_step=1000)

The file holds the latest metrics record and max_steps, replaced atomically every step
(json_file.atomic_write_json: temp file, fsync, os.replace, directory fsync) so a reader
(`trainer monitor`, the run store) never sees half a file. At the end of every run the
loop adds ``status`` (END_STATUSES), ``reason`` and ``ended_at`` (write_end, through
MetricsWriter.finish); a run killed without a word (SIGKILL, power loss) has none, and a
resume drops them (write_progress) while it runs again.

The file's name is names.TRAINING_STATE_FILE; readers with their own errors are
trainer/store/rundir.py (read_state) and trainer/monitor/snapshot.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.metrics_file import MetricsFileError, read_run_file

#: training_state.json holds one metrics record and a few fields: a few KB.
STATE_LIMIT = 16 * 1024 * 1024

#: How a run ended (training_state.json "status"): its last step reached, early stopping,
#: SIGTERM/SIGINT, a stop alert (monitoring.alerts), an exception (NaN, divergence, ...),
#: or a run that stopped (any of the first four) but could not write its final checkpoint
#: (disk full, a file size limit: exit status 6, trainer/exit_codes.py SAVE_FAILED).
END_STATUSES = ("finished", "early_stopping", "signal", "alert", "aborted", "save_failed")


def check_end_status(status: str) -> None:
    """ValueError unless ``status`` is one of END_STATUSES."""
    if status not in END_STATUSES:
        raise ValueError(f"end status {status!r} is not one of {', '.join(END_STATUSES)}")


def write_progress(path: Path, *, last_step: int, last: dict | None) -> None:
    """Replace ``path`` with the run's progress: ``last`` (a metrics line, or None before
    the first step) and ``last_step``, the step this run ends at; an end record there
    before is dropped."""
    atomic_write_json(path, {"last_step": last_step, "last": last})


def last_step_of(state: dict) -> object:
    """training_state.json's ``last_step``: the step the run ends at (files written before
    the name was given one meaning call it ``max_steps``)."""
    return state.get("last_step", state.get("max_steps"))


def write_end(
    path: Path, status: str, reason: str, *, ended: str, last_step: int | None = None
) -> None:
    """Add how the run ended to ``path``, atomically: its latest state plus ``status``,
    ``reason`` and ``ended_at`` (``ended``: UTC, ISO 8601). ``last_step`` fills a state
    file the run never wrote (it ended before a step). MetricsFileError when the file is
    not a JSON object (ours is atomic: something else wrote it)."""
    check_end_status(status)
    path = Path(path)
    try:
        state = json.loads(read_run_file(path, STATE_LIMIT))  # a FIFO: refused, not waited on
    except FileNotFoundError:
        state = {"last_step": last_step, "last": None}
    except MetricsFileError as exc:
        raise MetricsFileError(f"{exc}; the end status is not recorded") from None
    except ValueError as exc:  # not JSON: written by something else (ours is atomic)
        raise MetricsFileError(
            f"{path}: not JSON ({exc}); the end status is not recorded"
        ) from None
    if not isinstance(state, dict):
        raise MetricsFileError(f"{path}: not a JSON object; the end status is not recorded")
    atomic_write_json(path, state | {"status": status, "reason": reason, "ended_at": ended})
