"""Alert rules of a run config (``monitoring.alerts``): what each rule says, parsed once.

    rule = parse_rule({"when": "loss > 12.0", "action": "stop", "after_step": 100})
    rule.metric, rule.comparator, rule.threshold, rule.action    # "loss", ">", 12.0, "stop"
    rule.applies_at(step) and rule.breached(value)

A rule's ``when`` is ``METRIC COMPARATOR NUMBER``: a metric of a metrics.jsonl step record
(METRICS; ``val_loss`` exists only on evaluation steps), one of ``>``, ``>=``, ``<``, ``<=``,
and a finite number (YAML number forms: ``12``, ``1.5e-3``, ``1_000``). Anything else is an
:class:`AlertSyntaxError` with a hint; the loader (load.py) cites it at the rule's line.
The shape of a rule (keys, action, after_step) is the schema's job (schema.json); this
module checks the expression, which a JSON Schema pattern could only reject without saying
why. The loop evaluates the rules (trainer/train/alerts.py). No torch import.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Metrics a rule may watch: the numbers of a step record (trainer/train/metrics.py
#: MetricsWriter.step_record) plus val_loss, which evaluation steps add.
METRICS = ("loss", "grad_norm", "lr", "tokens_per_s", "step_s", "val_loss")
COMPARATORS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}

# METRIC, then a run of symbols (the comparator; not a sign or a decimal point), then the
# rest: each part is checked on its own, so a bad comparator or number gets its message.
_WHEN = re.compile(
    r"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_.]*)\s*(?P<op>[^\w\s.+-]+)\s*(?P<number>.*?)\s*$"
)
# A decimal number as YAML 1.2 writes one (underscores between digits allowed): float()
# alone would also take "nan", "inf" and "infinity", which no threshold can be.
_NUMBER = re.compile(r"^[+-]?(\d[\d_]*)?(\.[\d_]*)?([eE][+-]?\d+)?$")


class AlertSyntaxError(ValueError):
    """A rule's ``when`` is not ``METRIC COMPARATOR NUMBER``; ``hint`` says how to fix it."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class AlertRule:
    """One parsed rule; ``when`` keeps the text as written, for messages."""

    when: str
    metric: str
    comparator: str
    threshold: float
    action: str  # stop | warn
    after_step: int = 0  # steps before this one are not checked (warmup noise)

    def applies_at(self, step: int) -> bool:
        """Whether the rule is checked at ``step``: from ``after_step`` on."""
        return step >= self.after_step

    def breached(self, value: float) -> bool:
        """``value COMPARATOR threshold``; a NaN never breaches (guards.py handles it)."""
        return COMPARATORS[self.comparator](value, self.threshold)


def _metric_hint(name: str) -> str:
    close = difflib.get_close_matches(name, METRICS, n=1, cutoff=0.6)
    known = f"metrics: {', '.join(METRICS)}"
    return f"did you mean {close[0]}? {known}" if close else known


def parse_when(text: str) -> tuple[str, str, float]:
    """(metric, comparator, threshold) of ``text``, or AlertSyntaxError saying what is wrong."""
    form = "write METRIC COMPARATOR NUMBER, e.g. loss > 12.0"
    match = _WHEN.match(text)
    if match is None:
        raise AlertSyntaxError(f"{text!r} is not a rule", form)
    metric, op, number = match["metric"], match["op"], match["number"]
    if metric not in METRICS:
        raise AlertSyntaxError(f"unknown metric {metric!r} in {text!r}", _metric_hint(metric))
    if op not in COMPARATORS:
        raise AlertSyntaxError(
            f"comparator {op!r} in {text!r} is not one of {', '.join(COMPARATORS)}",
            "a rule fires when the metric crosses a threshold; == on a float never does"
            if op in ("==", "=", "!=")
            else form,
        )
    if not number:
        raise AlertSyntaxError(f"no threshold in {text!r}", form)
    threshold = _number(number)
    if threshold is None and number.lstrip("+-.").lower() in ("inf", "infinity", "nan"):
        threshold = math.nan  # reported as not finite below
    if threshold is None:
        raise AlertSyntaxError(f"threshold {number!r} in {text!r} is not a number", form)
    if not math.isfinite(threshold):
        raise AlertSyntaxError(
            f"threshold {number!r} in {text!r} is not a finite number",
            "write a finite number, e.g. 12.0 or 1.5e3",
        )
    return metric, op, threshold


def _number(text: str) -> float | None:
    if not _NUMBER.match(text) or not any(c.isdigit() for c in text):
        return None
    if "__" in text or text.endswith("_") or "_." in text or "._" in text:
        return None  # YAML (and Python) put underscores only between digits
    try:
        return float(text)  # a huge exponent gives inf, refused by the caller
    except ValueError:
        return None


def parse_rule(entry: Mapping[str, Any]) -> AlertRule:
    """An AlertRule of a schema-valid entry (``when``, ``action``, optional ``after_step``)."""
    metric, comparator, threshold = parse_when(entry["when"])
    return AlertRule(
        when=entry["when"].strip(),
        metric=metric,
        comparator=comparator,
        threshold=threshold,
        action=entry["action"],
        after_step=entry.get("after_step", 0),
    )
