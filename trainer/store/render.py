"""`trainer runs` as text: the ls table, one run's report, two runs side by side.

Plain aligned text (no colour, no terminal needed), so it reads the same in a log file.
"""

from __future__ import annotations

import json
from typing import Any

from trainer.store.compare import COMPARED
from trainer.store.query import RunView

ID_CHARS = 8  # the id prefix ls prints; `show`/`compare` accept any unique prefix


def number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def signed(value: Any) -> str:
    if value is None:
        return "-"
    text = number(abs(value))
    return f"+{text}" if value > 0 else f"-{text}" if value < 0 else text


def best_val(loss: float | None, step: int | None) -> str:
    return "-" if loss is None else f"{number(loss)} @{step}"


def status(run: dict[str, Any]) -> str:
    """The status with the loop's reason (``finished: step 10: last step 10 reached``)."""
    reason = run.get("stop_reason")
    return f"{run['status']}: {reason}" if reason and reason != run["status"] else run["status"]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def _ls_status(entry: dict[str, Any]) -> str:
    """The status alone (the reason is a sentence: `trainer runs show` prints it)."""
    text = entry["status"]
    if entry.get("note"):
        text += " [store behind: sync]"
    return text


def ls_table(entries: list[dict[str, Any]]) -> str:
    """``entries``: commands.ls_entry dicts."""
    rows = [["ID", "NAME", "STATUS", "STEPS", "LOSS", "BEST VAL", "STARTED", "DIR"]]
    for e in entries:
        steps = "-" if e["last_step"] is None else str(e["last_step"])
        if e["max_steps"] is not None:
            steps += f"/{e['max_steps']}"
        rows.append(
            [
                e["run_id"][:ID_CHARS],
                e["name"],
                _ls_status(e),
                steps,
                number(e["last_loss"]),
                best_val(e["best_val_loss"], e["best_val_step"]),
                e["started"] or "-",
                e["run_dir"],
            ]
        )
    return table(rows)


def show(view: RunView) -> str:
    run, m = view.run, view.metrics
    git = run["git_commit"] or "-"
    if run["git_dirty"]:
        git += " (dirty tree)"
    lines = [
        f"run          {run['run_id']}",
        f"name         {run['name']}",
        f"dir          {run['run_dir']}",
        f"status       {status(run)}",
        f"started      {run['started'] or '-'}  (this launch {run['launched'] or '-'})",
        f"ended        {run['ended'] or '-'}",
        f"git          {git}",
        f"config       sha256 {run['config_sha256'] or '-'}",
        f"seed         {number(run['seed'])}   world size {number(run['world_size'])}   "
        f"device {run['device'] or '-'}   host {run['host'] or '-'}",
        f"steps        {m.steps} stored (steps {m.first_step or '-'}..{m.last_step or '-'}"
        f" of {number(run['max_steps'])})",
        f"loss         first {number(m.first_loss)} -> last {number(m.last_loss)}",
        f"val loss     best {best_val(m.best_val_loss, m.best_val_step)} "
        f"({m.evaluations} evaluations)",
        f"tokens/s     median {number(m.median_tokens_per_s)}",
    ]
    if view.status_note():
        lines.append(f"note         {view.status_note()}")
    lines.append(f"params ({len(view.params)})")
    lines += [f"  {key} = {json.dumps(value)}" for key, value in view.params.items()]
    lines.append(f"artifacts ({len(view.artifacts)})")
    rows = [
        [
            a["kind"],
            "-" if a["step"] is None else str(a["step"]),
            a["path"],
            f"{a['bytes']:,} B",
            a["sha256"],
        ]
        for a in view.artifacts
    ]
    if rows:
        lines += ["  " + line for line in table(rows).splitlines()]
    return "\n".join(lines)


def compare(result: dict[str, Any]) -> str:
    a, b = result["runs"]
    head = [
        ["", "A", "B"],
        ["run", a["run_id"][:ID_CHARS], b["run_id"][:ID_CHARS]],
        ["name", a["name"], b["name"]],
        ["status", a["status"], b["status"]],
        ["dir", a["run_dir"], b["run_dir"]],
    ]
    params = result["params"]
    lines = [table(head), ""]
    lines.append(f"params: {len(params['differ'])} differ, {params['equal']} equal")
    rows = [
        ["  " + key, "(absent)" if x is None else x, "(absent)" if y is None else y]
        for key, (x, y) in params["differ"].items()
    ]
    if rows:
        lines.append(table([["", "A", "B"], *rows]))
    lines += ["", "metrics:"]
    rows = [["", "A", "B", "B - A"]]
    for key, label in COMPARED:
        item = result["metrics"][key]
        rows.append(
            ["  " + label, number(item["a"]), number(item["b"]), signed(item["difference"])]
        )
    lines.append(table(rows))
    return "\n".join(lines)
