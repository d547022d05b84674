"""The plot of one or more runs, and its bytes.

    fig = draw(runs, labels)          # loss (+ validation loss), lr, grad norm vs step
    data = to_bytes(fig, "svg")       # the same runs give the same bytes, every time

Panels share the step axis: loss with validation loss as dashed markers in the run's colour,
learning rate, and gradient norm when any run recorded one. Each run is one colour, named in
the legend. Every data line carries an SVG id, ``loss-I``, ``val_loss-I``, ``lr-I``,
``grad_norm-I`` (I = the run's position), so the output can be checked against the data.

Deterministic on purpose: a re-plot of the same run must not look like a change. The figure
lives on an Agg canvas, never in pyplot (no display, no global figure state); it is drawn
under matplotlib's default style (a user's matplotlibrc cannot change it), with a fixed SVG
hash salt (clip-path ids), no date, and our own name as the creator instead of matplotlib's
version. Path simplification is off so every point is in the output, as recorded.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import matplotlib
from matplotlib import style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from trainer.plot.runs import RunSeries

FORMATS = ("png", "svg")
#: Written into every file as its creator; an existing file without it is not ours.
CREATOR = "shipgate trainer plot"
_METADATA = {"png": {"Software": CREATOR}, "svg": {"Creator": CREATOR, "Date": None}}
_RC = {"svg.hashsalt": "shipgate-trainer-plot", "svg.fonttype": "path", "path.simplify": False}
WIDTH_IN, PANEL_IN, DPI = 8.0, 2.6, 100


@contextmanager
def _house_style() -> Iterator[None]:
    """matplotlib's defaults (not the user's matplotlibrc) plus the determinism settings."""
    with style.context("default"), matplotlib.rc_context(_RC):
        yield


def draw(runs: list[RunSeries], labels: list[str]) -> Figure:
    """One figure: a loss panel, an LR panel and (if recorded) a gradient-norm panel."""
    panels = [("loss", "loss"), ("lr", "learning rate")]
    if any(run.has_grad_norm for run in runs):
        panels.append(("grad_norm", "grad norm"))
    with _house_style():
        fig = Figure(figsize=(WIDTH_IN, PANEL_IN * len(panels)), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
            colour = f"C{i % 10}"
            axes[0].plot(run.steps, run.loss, color=colour, lw=1.2, label=label, gid=f"loss-{i}")
            if run.val_steps:
                axes[0].plot(
                    run.val_steps,
                    run.val_loss,
                    color=colour,
                    ls="--",
                    marker="o",
                    ms=4,
                    label=f"{label} (val)",
                    gid=f"val_loss-{i}",
                )
            for ax, (key, _) in zip(axes[1:], panels[1:], strict=True):
                if key == "grad_norm" and not run.has_grad_norm:
                    continue
                ax.plot(run.steps, getattr(run, key), color=colour, lw=1.2, gid=f"{key}-{i}")
        for ax, (_, name) in zip(axes, panels, strict=True):
            ax.set_ylabel(name)
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize="small")
        axes[-1].set_xlabel("step")
    return fig


def to_bytes(fig: Figure, fmt: str) -> bytes:
    """``fig`` as ``fmt`` (png or svg), deterministic for the same figure."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    buffer = io.BytesIO()
    with _house_style():
        fig.savefig(buffer, format=fmt, metadata=_METADATA[fmt])
    return buffer.getvalue()


def is_ours(path: Path) -> bool:
    """Whether ``path`` is a regular file this module wrote (it names CREATOR)."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    return CREATOR.encode() in path.read_bytes()
