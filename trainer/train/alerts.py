"""The run config's alert rules, checked against each step's metrics record.

    fired = check(cfg.monitoring.alerts, record)  # after the step (and its evaluation)
    annotate(record, fired)                       # record["alerts"] = [...] when any fired
    stop = first_stop(fired)                      # a stop rule: the run ends after this step

A rule (trainer/config/alerts.py) is checked from its ``after_step`` on, against the
record's value of its metric; ``val_loss`` exists only on evaluation steps, so a val_loss
rule is checked there alone. A rule fires on the first step whose value breaches it: the
comparison is the rule's own (``loss > 12`` does not fire at exactly 12). The record's
``alerts`` entry is new and optional, so readers of metrics.jsonl written before it (and
readers that ignore it: trainer plot, trainer monitor's numbers) keep working.

Why the loop, not a monitor: a watcher polling metrics.jsonl acts a poll interval late,
after more steps were taken and maybe checkpointed; the loop stops after the very step
that breached, with that step's checkpoint. The stop is agreed by every rank in loop.py
(like SIGTERM). No torch import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.config.alerts import AlertRule


@dataclass(frozen=True)
class Fired:
    """A rule breached at a step: which rule (its index in monitoring.alerts), the value."""

    index: int
    rule: AlertRule
    step: int
    value: float
    rank: int = 0  # the process whose record breached it (0 without data parallelism)

    def message(self) -> str:
        """``step 7: loss 12.3 breaches monitoring.alerts[0] "loss > 12.0" (stop)``."""
        on = f" on rank {self.rank}" if self.rank else ""
        return (
            f"step {self.step}{on}: {self.rule.metric} {self.value!r} breaches "
            f'monitoring.alerts[{self.index}] "{self.rule.when}" ({self.rule.action})'
        )

    def to_json(self) -> dict:
        """The record's ``alerts`` entry: strict JSON (an inf value becomes "inf")."""
        value = self.value if math.isfinite(self.value) else str(self.value)
        return {"rule": self.rule.when, "action": self.rule.action, "value": value}


def _value(record: dict, metric: str) -> float | None:
    value = record.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # absent: val_loss on a step without evaluation
    return float(value)


def check(rules: Sequence[AlertRule], record: dict) -> list[Fired]:
    """Every rule ``record`` breaches, in rule order."""
    step = record["step"]
    fired = []
    for index, rule in enumerate(rules):
        if not rule.applies_at(step):
            continue
        value = _value(record, rule.metric)
        if value is not None and rule.breached(value):
            fired.append(Fired(index, rule, step, value))
    return fired


def annotate(record: dict, fired: Sequence[Fired]) -> None:
    """Add ``alerts`` to the record when a rule fired (records without alerts stay as they were)."""
    if fired:
        record["alerts"] = [f.to_json() for f in fired]


def first_stop(fired: Sequence[Fired]) -> Fired | None:
    """The first stop rule that fired (rule order), or None."""
    return next((f for f in fired if f.rule.action == "stop"), None)


def has_stop_rules(rules: Sequence[AlertRule]) -> bool:
    return any(rule.action == "stop" for rule in rules)


def encode(fired: Fired | None) -> list:
    """A stop as [index, value hex] (or []) for the ranks' exchange (JSON, exact floats)."""
    return [] if fired is None else [fired.index, fired.value.hex()]


def decode(items: Sequence[list], rules: Sequence[AlertRule], step: int) -> Fired | None:
    """The first rank's stop of the per-rank encode() results (rank order), or None."""
    for rank, item in enumerate(items):
        if item:
            index, value = item
            return Fired(index, rules[index], step, float.fromhex(value), rank)
    return None
