"""Two stored runs side by side: the params that differ, and the metrics with differences.

    result = comparison(view_a, view_b)
    result["params"]["differ"]     # {"optimizer.lr": ["0.003", "0.001"], "x.y": ["1", None]}
    result["params"]["equal"]      # how many params are the same
    result["metrics"]["last_loss"] # {"a": 2.31, "b": 2.47, "difference": 0.16}  (b - a)

Param values are JSON text, as stored (``"0.003"``, ``"\"adamw\""``, ``"null"``), so a param
one run has and the other has not (None on the side without it) is told from one whose
value is null.
"""

from __future__ import annotations

import json
from typing import Any

from trainer.store.query import RunView

#: The metrics compared, in order: (key, label).
COMPARED = (
    ("steps", "steps"),
    ("last_step", "last step"),
    ("first_loss", "first loss"),
    ("last_loss", "final loss"),
    ("best_val_loss", "best val loss"),
    ("best_val_step", "best val step"),
    ("median_tokens_per_s", "median tokens/s"),
)
_ABSENT = object()


def _metric_values(view: RunView) -> dict[str, Any]:
    values = dict(vars(view.metrics))
    values["max_steps"] = view.run.get("max_steps")
    return values


def comparison(a: RunView, b: RunView) -> dict[str, Any]:
    """The JSON-ready comparison of runs ``a`` and ``b``."""
    differ: dict[str, list[Any]] = {}
    equal = 0
    for key in sorted(set(a.params) | set(b.params)):
        left, right = a.params.get(key, _ABSENT), b.params.get(key, _ABSENT)
        if left is not _ABSENT and right is not _ABSENT and left == right:
            equal += 1
        else:
            differ[key] = [
                None if v is _ABSENT else json.dumps(v, sort_keys=True) for v in (left, right)
            ]
    ma, mb = _metric_values(a), _metric_values(b)
    metrics = {}
    for key, _ in COMPARED:
        x, y = ma.get(key), mb.get(key)
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y))
        metrics[key] = {"a": x, "b": y, "difference": y - x if numeric else None}
    return {
        "runs": [_identity(a), _identity(b)],
        "params": {"differ": differ, "equal": equal},
        "metrics": metrics,
    }


def _identity(view: RunView) -> dict[str, Any]:
    run = view.run
    return {
        "run_id": run["run_id"],
        "name": run["name"],
        "run_dir": run["run_dir"],
        "status": run["status"],
        "config_sha256": run["config_sha256"],
    }
