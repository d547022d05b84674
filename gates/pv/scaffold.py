"""`pv init`: the files a project that has never seen shipgate needs to start.

One example contract (C-EXAMPLE) bound to one example test, the mutant that test must kill,
the measurement of its gate, an ``evidence/`` folder, and in ``pyproject.toml`` the pytest
marker registration and the ``[tool.shipgate]`` table (gates.model.project). Every file is
planned and checked before any is written: an existing file is never overwritten, and a
``pyproject.toml`` is only ever appended to, and only when the result still parses.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gates.io.atomic import LOCK_NAME
from gates.io.files import atomic_write_text

SUBJECT = "shipgate_example.py"
GATE_ID = "GATE-EXAMPLE-001"

_SUBJECT = '''\
"""Code under contract C-EXAMPLE (contracts/example-v1.yaml), written by `pv init`.

Replace it with your own: a contract binds invariants of *your* code to tests that can
fail. This one is a training loop's reported loss: the mean over real tokens only.
"""


def token_mean_loss(losses: list[float], mask: list[int]) -> float:
    """Mean of ``losses`` over the positions where ``mask`` is 1 (padding is 0)."""
    tokens = sum(mask)
    if tokens == 0:
        raise ValueError("no real token: a token-mean loss is undefined")
    return sum(loss for loss, real in zip(losses, mask, strict=True) if real) / tokens
'''

_TEST = '''\
"""FALSIFY-EXAMPLE-001 (contracts/example-v1.yaml): padding never moves the loss."""

import pytest

import shipgate_example


@pytest.mark.ship_blocking
def test_padding_never_changes_the_token_mean():
    real = [2.0, 4.0, 9.0]
    padded = shipgate_example.token_mean_loss([*real, 100.0, 100.0], [1, 1, 1, 0, 0])
    assert padded == shipgate_example.token_mean_loss(real, [1, 1, 1]) == 5.0
'''

_MUTANT = '''\
"""Known bugs FALSIFY-EXAMPLE-001 must catch; `gates audit` injects each in turn."""

import shipgate_example
from gates.mutants import mutant


@mutant("padding-counted-in-mean")
def _padding_counted(patch):
    patch.setattr(shipgate_example, "token_mean_loss", lambda losses, mask: sum(losses) / len(mask))
'''

_MEASUREMENT = '''\
"""The measurement behind GATE-EXAMPLE-001: how far padding moves the token-mean loss."""

import random

import shipgate_example
from gates.measure import GateContext, Measurement, measures


@measures("GATE-EXAMPLE-001")
def padding_effect(ctx: GateContext) -> Measurement:
    rng = random.Random(0)
    worst = 0.0
    for _ in range(200):
        real = [rng.uniform(0.0, 10.0) for _ in range(rng.randint(1, 16))]
        padding = [rng.uniform(0.0, 1e6) for _ in range(rng.randint(1, 16))]
        clean = shipgate_example.token_mean_loss(real, [1] * len(real))
        padded = shipgate_example.token_mean_loss(
            real + padding, [1] * len(real) + [0] * len(padding)
        )
        worst = max(worst, abs(padded - clean))
    return Measurement(
        values={"max_padding_effect": (worst, "loss")},
        workload="200 random sequences (1-16 real tokens, 1-16 padding tokens), seed 0",
        inputs=[ctx.root / "shipgate_example.py"],
    )
'''

_CONTRACT = """\
# An example contract written by `pv init`: copy its shape for your own.
# Check it with `pv validate contracts/*.yaml`, re-measure its gate with
# `gates check GATE-EXAMPLE-001`, and record evidence with `gates promote GATE-EXAMPLE-001`.
metadata:
  id: C-EXAMPLE
  version: 1.0.0
  status: PROPOSED
  kind: training-loop
  created: {today}
  updated: {today}
  description: >-
    The loss a training step reports is the mean over real tokens: padding never counts.
invariants:
  - id: INV-EXAMPLE-001
    statement: Appending padding positions (mask 0) to a sequence leaves its loss unchanged.
    formula: "token_mean_loss(l + p, m + [0]*len(p)) == token_mean_loss(l, m)"
    falsified_by: [FALSIFY-EXAMPLE-001]
falsification_tests:
  - id: FALSIFY-EXAMPLE-001
    rule: a padded and an unpadded sequence report the same loss
    prediction: both are the mean over the real tokens
    status: bound
    test: tests/test_example_contract.py::test_padding_never_changes_the_token_mean
    if_fails: padding is counted in the loss, so the loss depends on batch shape
    mutants:
      - id: padding-counted-in-mean
        description: the mean is taken over every position, padding included
gates:
  - id: GATE-EXAMPLE-001
    rule: padding moves the token-mean loss by nothing at all
    falsification_tests: [FALSIFY-EXAMPLE-001]
    threshold: {{metric: max_padding_effect, comparator: "<=", value: 0, unit: loss}}
    ship_blocking: true
    status: PENDING
changelog:
  - version: 1.0.0
    date: {today}
    text: Written by pv init.
"""

_EVIDENCE_README = """\
Evidence JSON, one file per gate (`<contract id>/<gate id>.json`), written only by
`gates promote` and `gates check --out`. Commit it: a PASS is only as good as the
evidence anyone can re-verify.
"""

_PYTEST_TABLE = """\
[tool.pytest.ini_options]
# The project root on sys.path, so tests import the code under contract by its name.
pythonpath = ["."]
markers = [
    "ship_blocking: bound to a ship-blocking gate in contracts/; run with -m ship_blocking",
]
"""

_SHIPGATE_TABLE = """\
[tool.shipgate]
# Directories whose modules register mutants (@mutant) and gate measurements (@measures).
mutants = ["tests/mutants"]
measurements = ["tests/measurements"]
"""


class ScaffoldError(Exception):
    """The scaffold would overwrite something or leave a broken pyproject.toml."""


@dataclass(frozen=True)
class Plan:
    #: path → full new text (created or appended to)
    writes: dict[Path, str]
    created: list[Path]
    appended: list[Path]
    #: the project's own [tool.pytest.ini_options] was kept as it is
    kept_pytest_table: bool = False


def plan(root: Path, today: dt.date | None = None) -> Plan:
    """Every file `pv init` writes under ``root``; raises ScaffoldError before any write."""
    today = today or dt.date.today()
    new_tests_dir = not (root / "tests").exists()
    files = {
        root / "contracts" / "example-v1.yaml": _CONTRACT.format(today=today.isoformat()),
        root / SUBJECT: _SUBJECT,
        root / "tests" / "test_example_contract.py": _TEST,
        root / "tests" / "mutants" / "example.py": _MUTANT,
        root / "tests" / "measurements" / "example.py": _MEASUREMENT,
        root / "evidence" / "README.md": _EVIDENCE_README,
    }
    if new_tests_dir:  # a package: pytest and gates then import tests the same way
        files[root / "tests" / "__init__.py"] = ""
    clashes = [p for p in files if p.exists() or p.is_symlink()]
    if clashes:
        raise ScaffoldError(
            "would overwrite "
            + ", ".join(str(p.relative_to(root)) for p in clashes)
            + "; nothing was written"
        )
    pyproject = root / "pyproject.toml"
    files[pyproject], kept_pytest_table = _pyproject_text(pyproject)
    gitignore = root / ".gitignore"
    ignored = gitignore.read_text(encoding="utf-8") if gitignore.is_file() else ""
    if LOCK_NAME not in ignored.splitlines():  # gates' lock is never committed
        files[gitignore] = ignored + ("\n" if ignored and not ignored.endswith("\n") else "")
        files[gitignore] += f"{LOCK_NAME}\n"
    appended = [p for p in (pyproject, gitignore) if p in files and p.exists()]
    return Plan(
        writes=files,
        created=[p for p in files if p not in appended],
        appended=appended,
        kept_pytest_table=kept_pytest_table,
    )


def _pyproject_text(pyproject: Path) -> tuple[str, bool]:
    """The new pyproject.toml text, and whether the project's pytest table was kept."""
    if not pyproject.exists():
        return f"{_PYTEST_TABLE}\n{_SHIPGATE_TABLE}", False
    if not pyproject.is_file():
        raise ScaffoldError(f"{pyproject} is not a regular file; nothing was written")
    try:
        old = pyproject.read_text(encoding="utf-8")
        tool = tomllib.loads(old).get("tool", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ScaffoldError(f"{pyproject}: not valid TOML ({e}); nothing was written") from e
    if "shipgate" in tool:
        raise ScaffoldError(f"{pyproject} already has [tool.shipgate]; nothing was written")
    tables = [_SHIPGATE_TABLE] if "pytest" in tool else [_PYTEST_TABLE, _SHIPGATE_TABLE]
    new = old + ("" if old.endswith("\n") or not old else "\n") + "\n" + "\n".join(tables)
    try:
        tomllib.loads(new)
    except tomllib.TOMLDecodeError as e:  # e.g. a dotted tool.pytest key we cannot extend
        raise ScaffoldError(
            f"{pyproject}: appending [tool.shipgate] would not parse ({e}); add it by hand "
            "(docs/measurements.md); nothing was written"
        ) from e
    return new, "pytest" in tool


def apply(p: Plan) -> None:
    for path, text in p.writes.items():
        atomic_write_text(path, text)  # creates missing parent directories


def next_steps(root: Path, p: Plan) -> str:
    lines = [f"created {path.relative_to(root)}" for path in p.created]
    lines += [f"appended to {path.relative_to(root)}" for path in p.appended]
    if p.kept_pytest_table:
        lines.append(
            "note: your [tool.pytest.ini_options] was left as it is: register the "
            "ship_blocking marker there and make the project root importable by tests"
        )
    lines += [
        "",
        "next:",
        "  pv validate contracts/*.yaml",
        f"  gates check {GATE_ID}",
        "  gates audit --files contracts/example-v1.yaml",
        f"  gates promote {GATE_ID}    # after committing: evidence records the commit",
    ]
    return "\n".join(lines)
