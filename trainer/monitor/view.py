"""A snapshot as a rich renderable: a panel of labelled rows, then the alerts.

    Console().print(render(take_snapshot(run_dir)))

Every value goes in as ``Text``, never as markup: a run directory named ``[red]`` or a
loss printed as ``nan`` must show as itself.
"""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from trainer.monitor.snapshot import Snapshot, duration
from trainer.monitor.sparkline import SERIES_WIDTH, sparkline

STATUS_STYLE = {
    "running": "green",
    "finished": "cyan",
    "early_stopping": "cyan",
    "signal": "yellow",
    "stale": "yellow",
    "starting": "dim",
    "alert": "bold red",
    "aborted": "bold red",
    "save_failed": "bold red",
}


def _value(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return format(value, spec) if math.isfinite(value) else str(value)


def _rows(snap: Snapshot) -> list[tuple[str, RenderableType]]:
    step = "-" if snap.step is None else f"{snap.step:,}"
    total = "?" if snap.last_step is None else f"{snap.last_step:,}"
    progress = Text(f"{step} / {total}")
    if snap.percent is not None:
        progress.append(f"  ({snap.percent:.1f} %)")
    rows: list[tuple[str, RenderableType]] = [("step", progress)]
    if snap.last_step is not None and snap.step is not None:
        rows.append(("", ProgressBar(total=snap.last_step, completed=snap.step, width=40)))
    norm_median = _value(snap.grad_norm_median, ".4f")
    rows += [
        ("loss", Text(f"{_value(snap.loss, '.4f'):>10}  {sparkline(snap.losses, SERIES_WIDTH)}")),
        ("lr", Text(f"{_value(snap.lr, '.2e'):>10}  {sparkline(snap.lrs, SERIES_WIDTH)}")),
        ("grad norm", Text(f"{_value(snap.grad_norm, '.4f'):>10}  median {norm_median}")),
        ("tokens/s", Text(f"{_value(snap.tokens_per_s, ',.0f'):>10}  median of recent steps")),
        ("step time", Text(f"{_value(snap.step_s, '.3f'):>10} s")),
        ("ETA", Text(duration(snap.eta_s))),
        ("elapsed", Text(duration(snap.elapsed_s))),
    ]
    if snap.val_loss is not None:
        rows.append(("val loss", Text(f"{_value(snap.val_loss, '.4f'):>10}")))
    ckpt = snap.last_checkpoint
    saved = f"step {ckpt.step:,}, {duration(ckpt.age_s)} ago" if ckpt else "none yet"
    rows.append(("checkpoint", Text(saved)))
    rows.append(("updated", Text(f"{duration(snap.updated_s_ago)} ago")))
    if snap.reason is not None:
        rows.append(("ended", Text(f"{snap.status}: {snap.reason}")))
    return rows


def render(snap: Snapshot) -> RenderableType:
    """The whole view of one snapshot."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for label, value in _rows(snap):
        table.add_row(label, value)
    parts: list[RenderableType] = [table]
    for alert in snap.alerts:
        parts.append(Text(f"! {alert.kind}: {alert.message}", style="bold red"))
    title = Text("trainer monitor  ")
    title.append(snap.run_dir, style="bold")
    status = Text(snap.status, style=STATUS_STYLE.get(snap.status, ""))
    return Panel(Group(*parts), title=title, subtitle=status, expand=False)
