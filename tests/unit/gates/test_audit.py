"""gates.audit.bound_tests: a mutant is killed only by an assertion of its bound test, and a
mutant whose seams do not hold is reported seam-broken and never run (issue 18 item 5, issue 19).

One throwaway project (a shop module, three bound tests, nine mutants) is audited once for
the module, through the CLI, with --out; each test below reads one row of that audit. About
ten pytest processes: one per test on the real code and per mutant that is run."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest

from gates.audit import bound_tests
from gates.cli import gates as gates_cli
from gates.runner import testrun
from tools import compare_audits

SHOP = """\
def total(prices, discount=0.0):
    return sum(prices) * (1 - discount)


def parse_qty(text):
    if not text.isdigit():
        raise ValueError(f"not a quantity: {text!r}")
    return int(text)
"""

TESTS = """\
import pytest

import shop


def test_total():
    assert shop.total([1, 2, 3], discount=0.5) == 3.0


def test_parse_qty_rejects_words():
    with pytest.raises(ValueError):
        shop.parse_qty("three")


def test_parse_qty():
    if shop.parse_qty("3") != 3:
        pytest.fail("parse_qty('3') is not 3")


def test_parse_qty_through_a_helper():
    try:
        value = shop.parse_qty("4")
    except Exception as exc:  # a helper that turns any error into a failure
        pytest.fail(f"parse_qty('4') raised: {exc}")
    assert value == 4
"""

MUTANTS = """\
import shop

from gates.mutants import mutant

real_total, real_parse = shop.total, shop.parse_qty


@mutant("discount-ignored")                   # the positive control: a plain wrong value
def _(patch):
    patch.setattr(shop, "total", lambda prices, discount=0.0: sum(prices))


@mutant("total-plus-one-through-star-args")   # *args/**kwargs stand in for any signature
def _(patch):
    patch.setattr(shop, "total", lambda *args, **kwargs: real_total(*args, **kwargs) + 1)


@mutant("total-drops-discount")               # the test's call total(..., discount=0.5)
def _(patch):                                 # would die of a TypeError: never run
    patch.setattr(shop, "total", lambda prices: sum(prices))


@mutant("patches-a-renamed-seam")             # shop.sum_prices was renamed to total:
def _(patch):                                 # raising=False would silently add it
    patch.setattr(shop, "sum_prices", lambda prices, discount=0.0: 0, raising=False)


@mutant("stale-source-edit")                  # applying it fails: not appliable, not run
def _(patch):
    raise LookupError("'sum(prices)' occurs 0 times, not once")


@mutant("total-of-strings")                   # a compatible seam whose bug is a TypeError
def _(patch):
    patch.setattr(shop, "total", lambda prices, discount=0.0: sum(map(str, prices)))


@mutant("words-accepted")                     # pytest.raises: DID NOT RAISE
def _(patch):
    patch.setattr(shop, "parse_qty", lambda text: int(text) if text.isdigit() else 0)


@mutant("words-raise-type-error")             # pytest.raises(ValueError) sees a TypeError
def _(patch):
    def parse_qty(text):
        if not text.isdigit():
            raise TypeError("a word")
        return int(text)

    patch.setattr(shop, "parse_qty", parse_qty)


@mutant("qty-off-by-one")                     # pytest.fail
def _(patch):
    patch.setattr(shop, "parse_qty", lambda text: real_parse(text) + 1)


def _raising(exc):
    def parse_qty(text):
        raise exc

    return parse_qty


@mutant("qty-crashes")                        # pytest.fail while handling an AttributeError:
def _(patch):                                 # a crash turned into a failure, not a kill
    patch.setattr(shop, "parse_qty", _raising(AttributeError("'NoneType' has no attribute")))


@mutant("qty-refused", refused_with=(ValueError,))   # refusing IS the detection here
def _(patch):
    patch.setattr(shop, "parse_qty", _raising(ValueError("refused")))
"""

CONTRACT = """\
metadata:
  id: C-SHOP
  version: 1.0.0
  status: PROPOSED
  kind: tooling
  created: 2026-01-05
  updated: 2026-01-05
  description: A throwaway shop for the audit's unit tests.
invariants:
  - id: INV-SHOP-001
    statement: totals and quantities are right.
    falsified_by: [FALSIFY-SHOP-001, FALSIFY-SHOP-002, FALSIFY-SHOP-003, FALSIFY-SHOP-004]
falsification_tests:
  - id: FALSIFY-SHOP-001
    rule: a discounted total
    prediction: "3.0"
    status: bound
    test: tests/test_shop.py::test_total
    if_fails: totals are wrong
    mutants:
{total_mutants}
  - id: FALSIFY-SHOP-002
    rule: words are refused
    prediction: ValueError
    status: bound
    test: tests/test_shop.py::test_parse_qty_rejects_words
    if_fails: a word is taken for a quantity
    mutants:
{refusal_mutants}
  - id: FALSIFY-SHOP-003
    rule: a quantity parses
    prediction: "3"
    status: bound
    test: tests/test_shop.py::test_parse_qty
    if_fails: quantities are wrong
    mutants:
{parse_mutants}
  - id: FALSIFY-SHOP-004
    rule: a quantity parses, through a helper that fails on any error
    prediction: "4"
    status: bound
    test: tests/test_shop.py::test_parse_qty_through_a_helper
    if_fails: quantities are refused
    mutants:
{helper_mutants}
gates:
  - id: GATE-SHOP-001
    rule: the shop is right
    falsification_tests: [FALSIFY-SHOP-001, FALSIFY-SHOP-002, FALSIFY-SHOP-003, FALSIFY-SHOP-004]
    threshold: {{metric: errors, comparator: "<=", value: 0, unit: errors}}
    ship_blocking: false
    status: PENDING
changelog:
  - version: 1.0.0
    date: 2026-01-05
    text: Initial.
"""

TOTAL_MUTANTS = [
    "discount-ignored",
    "total-plus-one-through-star-args",
    "total-drops-discount",
    "patches-a-renamed-seam",
    "stale-source-edit",
    "total-of-strings",
]
REFUSAL_MUTANTS = ["words-accepted", "words-raise-type-error"]
PARSE_MUTANTS = ["qty-off-by-one"]
HELPER_MUTANTS = ["qty-crashes", "qty-refused"]


def _mutant_list(ids: list[str]) -> str:
    return "\n".join(f"      - id: {m}\n        description: {m.replace('-', ' ')}" for m in ids)


def build_shop(root: Path) -> Path:
    """Write the throwaway project under ``root``; return its contract."""
    files = {
        "pyproject.toml": "# throwaway shop project\n",
        "conftest.py": "# puts the project root on sys.path\n",
        "shop.py": SHOP,
        "tests/test_shop.py": TESTS,
        "tests/mutants/shop_mutants.py": MUTANTS,
        "contracts/shop.yaml": CONTRACT.format(
            total_mutants=_mutant_list(TOTAL_MUTANTS),
            refusal_mutants=_mutant_list(REFUSAL_MUTANTS),
            parse_mutants=_mutant_list(PARSE_MUTANTS),
            helper_mutants=_mutant_list(HELPER_MUTANTS),
        ),
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root / "contracts" / "shop.yaml"


class Audited:
    """The shop's audit: exit status, printed table, and the --out record."""

    def __init__(self, root: Path, status: int, table: str, record: dict) -> None:
        self.root, self.status, self.table, self.record = root, status, table, record

    def row(self, test: str, mutant: str | None) -> dict:
        (found,) = [r for r in self.record["rows"] if (r["test"], r["mutant"]) == (test, mutant)]
        return found


def _audit(tmp_path_factory: pytest.TempPathFactory, *options: str) -> Audited:
    root = tmp_path_factory.mktemp("shop")
    contract = build_shop(root)
    out = tmp_path_factory.mktemp("elsewhere") / "audit.json"  # outside the project
    args = ["audit", "--files", str(contract), "--root", str(root), "--out", str(out), *options]
    stdout = io.StringIO()  # capsys is per test; this fixture is per module
    with (
        mock.patch.object(sys, "argv", ["gates", *args]),  # what the record's command is
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        status = gates_cli.main(args)
    return Audited(root, status, stdout.getvalue(), json.loads(out.read_text()))


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Audited:
    """The audit as CI runs it: forked from warm interpreters, two runs at a time."""
    return _audit(tmp_path_factory, "--jobs", "2")


@pytest.mark.slow
def test_the_forked_parallel_audit_says_what_fresh_processes_one_at_a_time_say(
    audited, tmp_path_factory
):
    """Same rows, failures, seam checks and sources (gates.runner.forkrun); only seconds differ."""
    fresh = _audit(tmp_path_factory, "--no-fork", "--jobs", "1")
    assert fresh.status == audited.status
    assert compare_audits.differences(fresh.record, audited.record) == []
    assert [(r["test"], r["mutant"]) for r in fresh.record["rows"]] == [
        (r["test"], r["mutant"]) for r in audited.record["rows"]
    ]  # in the contract's order, whichever finished first
    assert _table(fresh) == _table(audited)  # the printed table too, but for its seconds


def _table(audited: Audited) -> list[str]:
    lines = [line for line in audited.table.splitlines() if "evidence written" not in line]
    return [re.sub(r" +\d+\.\d\d\b", " <seconds>", line) for line in lines]


def test_the_real_code_passes_every_bound_test(audited):
    for test in ("FALSIFY-SHOP-001", "FALSIFY-SHOP-002", "FALSIFY-SHOP-003"):
        row = audited.row(test, None)
        assert (row["outcome"], row["verdict"]) == ("passed", "passes")
        assert row["failure"] is None and row["seam_check"] is None


def test_a_wrong_value_caught_by_an_assert_is_killed(audited):
    """The positive control: the classification still kills a correct mutant."""
    row = audited.row("FALSIFY-SHOP-001", "discount-ignored")
    assert (row["outcome"], row["verdict"]) == ("failed", "killed")
    assert row["failure"]["exception"] == "AssertionError"
    assert row["failure"]["assertion"] is True and row["failure"]["phase"] == "call"
    assert row["failure"]["raised_in"] == "test_shop"
    assert row["seam_check"] == {
        "ok": True,
        "error": None,
        "seams": [
            {
                "owner": "shop",
                "attribute": "total",
                "status": "ok",
                "original": "(prices, discount=…)",
                "replacement": "(prices, discount=…)",
                "reason": "",
            }
        ],
    }


def test_a_star_args_replacement_fits_any_seam_and_is_killed(audited):
    row = audited.row("FALSIFY-SHOP-001", "total-plus-one-through-star-args")
    assert row["seam_check"]["seams"][0]["status"] == "ok"
    assert row["seam_check"]["seams"][0]["replacement"] == "(*args, **kwargs)"
    assert (row["outcome"], row["verdict"]) == ("failed", "killed")


def test_did_not_raise_and_pytest_fail_are_assertions_that_kill(audited):
    did_not_raise = audited.row("FALSIFY-SHOP-002", "words-accepted")
    assert (did_not_raise["outcome"], did_not_raise["verdict"]) == ("failed", "killed")
    assert did_not_raise["failure"]["message"].startswith("DID NOT RAISE")
    failed = audited.row("FALSIFY-SHOP-003", "qty-off-by-one")
    assert (failed["outcome"], failed["verdict"]) == ("failed", "killed")
    assert failed["failure"]["message"] == "parse_qty('3') is not 3"
    assert failed["failure"]["raised_in"] == "test_shop", "pytest.fail's own frame is hidden"
    for row in (did_not_raise, failed):
        assert row["failure"]["exception"] == "Failed"  # pytest names its module builtins


@pytest.mark.parametrize(
    ("test", "mutant", "exception"),
    [
        ("FALSIFY-SHOP-001", "total-of-strings", "TypeError"),
        ("FALSIFY-SHOP-002", "words-raise-type-error", "TypeError"),
    ],
)
def test_a_test_dying_of_a_type_error_is_crashed_not_killed(audited, test, mutant, exception):
    row = audited.row(test, mutant)
    assert (row["outcome"], row["verdict"]) == ("crashed", "CRASHED")
    assert row["failure"]["exception"] == exception and row["failure"]["assertion"] is False


def test_a_crash_turned_into_pytest_fail_is_crashed_not_killed(audited):
    """A helper's ``except Exception: pytest.fail(...)`` hides the crash from pytest, not
    from the audit: the failure was raised while handling an AttributeError."""
    row = audited.row("FALSIFY-SHOP-004", "qty-crashes")
    assert (row["outcome"], row["verdict"]) == ("crashed", "CRASHED")
    assert row["failure"]["assertion"] is False and row["failure"]["exception"] == "Failed"
    assert "while handling AttributeError" in row["failure"]["message"]


def test_a_declared_refusal_turned_into_pytest_fail_is_a_kill(audited):
    row = audited.row("FALSIFY-SHOP-004", "qty-refused")
    assert (row["outcome"], row["verdict"]) == ("failed", "killed")
    assert row["failure"]["assertion"] is True


def test_a_replacement_that_drops_a_parameter_is_seam_broken_and_not_run(audited):
    row = audited.row("FALSIFY-SHOP-001", "total-drops-discount")
    assert (row["outcome"], row["verdict"], row["seconds"]) == ("seam-broken", "SEAM-BROKEN", 0)
    assert row["failure"] is None, "not run"
    (seam,) = row["seam_check"]["seams"]
    assert (seam["owner"], seam["attribute"], seam["status"]) == ("shop", "total", "incompatible")
    assert (seam["original"], seam["replacement"]) == ("(prices, discount=…)", "(prices)")
    assert "unexpected keyword argument 'discount'" in seam["reason"]


def test_a_patch_of_a_missing_attribute_is_seam_broken_even_without_raising(audited):
    row = audited.row("FALSIFY-SHOP-001", "patches-a-renamed-seam")
    assert (row["outcome"], row["verdict"]) == ("seam-broken", "SEAM-BROKEN")
    (seam,) = row["seam_check"]["seams"]
    assert (seam["owner"], seam["attribute"], seam["status"]) == ("shop", "sum_prices", "missing")


def test_a_mutant_that_cannot_be_applied_is_seam_broken(audited):
    row = audited.row("FALSIFY-SHOP-001", "stale-source-edit")
    assert row["outcome"] == "seam-broken"
    assert row["seam_check"]["error"] == (
        "applying it raised LookupError: 'sum(prices)' occurs 0 times, not once"
    )


def test_crashes_and_broken_seams_fail_the_audit_and_are_printed(audited):
    assert audited.status == 1
    record = audited.record
    assert (record["mutants"], record["killed"], record["ok"]) == (11, 5, False)
    table = audited.table
    assert "mutants killed: 5 of 11, 3 CRASHED, 3 SEAM-BROKEN; real code passes" in table
    assert "shop.total: incompatible (the call (prices=…, discount=…) binds" in table
    assert "shop.sum_prices: missing (no such attribute)" in table
    assert "TypeError: a word (call, raised in tests.mutants.shop_mutants)" in table


def test_the_audit_record_holds_no_path_of_this_machine(audited):
    text = json.dumps(audited.record, ensure_ascii=False)
    assert str(audited.root) not in text and str(audited.root.resolve()) not in text
    assert "/tmp" not in text and "pytest-of-" not in text
    out_argument = audited.record["command"][audited.record["command"].index("--out") + 1]
    assert out_argument == "…/audit.json"
    assert audited.record["command"][audited.record["command"].index("--files") + 1] == (
        "contracts/shop.yaml"
    )


def test_a_pytest_started_by_a_test_does_not_write_the_audits_failures(tmp_path, monkeypatch):
    """The plugin pops $SHIPGATE_FAILURES, so a nested pytest that fails on purpose (this
    repository's own tests do that) cannot pass for the audited test's failure."""
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "test_nested.py").write_text(
        textwrap.dedent("""\
            import os, subprocess, sys

            def test_outer(tmp_path):
                (tmp_path / "test_inner.py").write_text("def test_inner():\\n    1 / 0\\n")
                inner = subprocess.run([sys.executable, "-m", "pytest", "-q", str(tmp_path)])
                assert inner.returncode == 1
                assert "SHIPGATE_FAILURES" not in os.environ
            """)
    )
    (tmp_path / "pyproject.toml").write_text("")
    out = testrun.run_node(tmp_path, "test_nested.py::test_outer")
    assert (out.outcome, out.failures) == ("passed", ()), out.output


def test_a_crash_that_recorded_no_failure_shows_the_last_line_the_run_printed():
    """A segfault in C code or an os._exit leaves pytest nothing to record: the run's last
    line is all there is to go on, so the row shows it (and says nothing for a pass)."""
    printed = "collected 1 item\n\nFatal Python error: Segmentation fault\n\n"
    note = bound_tests.note_of("crashed", printed)
    assert note == "Fatal Python error: Segmentation fault"
    row = bound_tests.AuditRow("C", "FALSIFY-X-001", "t.py::test", None, "crashed", 0.4, note=note)
    assert row.verdict == "REAL CODE CRASHED"
    assert row.why() == [
        "pytest failed but recorded no failure (is the shipgate plugin loaded?)",
        "last line: Fatal Python error: Segmentation fault",
    ]
    assert bound_tests.note_of("error", "usage: pytest\nERROR: file not found: t.py\n") == (
        "ERROR: file not found: t.py"
    )
    assert bound_tests.note_of("passed", printed) == bound_tests.note_of("failed", printed) == ""
