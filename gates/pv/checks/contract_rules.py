"""Checks of one schema-valid contract on its own."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from gates.io.jsonpath import json_path
from gates.model import semver
from gates.model.contract import Contract
from gates.model.findings import Issue
from gates.model.schema import did_you_mean


def duplicate_ids(c: Contract) -> Iterator[Issue]:
    """ID-DUPLICATE: an invariant, test, gate or mutant id appears twice in one contract."""
    seen: dict[str, tuple] = {}
    items = [(i.id, i.where) for i in c.invariants]
    items += [(t.id, t.where) for t in c.falsification_tests]
    items += [(g.id, g.where) for g in c.gates]
    for id_, where in items:
        if id_ in seen:
            yield Issue(
                "ID-DUPLICATE",
                (*where, "id"),
                f"`{id_}` is already defined at {json_path(seen[id_], root='')}",
            )
        else:
            seen[id_] = where
    for t in c.falsification_tests:
        names: set[str] = set()
        for m in t.mutants:
            if m.id in names:
                yield Issue(
                    "ID-DUPLICATE", (*m.where, "id"), f"mutant `{m.id}` is listed twice for {t.id}"
                )
            names.add(m.id)


def dangling_test_refs(c: Contract) -> Iterator[Issue]:
    """REF-DANGLING: an invariant or gate names a falsification test this contract lacks."""
    known = {t.id for t in c.falsification_tests}
    for inv in c.invariants:
        for k, ref in enumerate(inv.falsified_by):
            if ref not in known:
                yield Issue(
                    "REF-DANGLING",
                    (*inv.where, "falsified_by", k),
                    f"{inv.id} is falsified by `{ref}`, which this contract does not define",
                    _suggest(ref, known),
                )
    for gate in c.gates:
        for k, ref in enumerate(gate.falsification_tests):
            if ref not in known:
                yield Issue(
                    "REF-DANGLING",
                    (*gate.where, "falsification_tests", k),
                    f"{gate.id} rests on `{ref}`, which this contract does not define",
                    _suggest(ref, known),
                )


def _suggest(ref: str, known: set[str]) -> str | None:
    guess = did_you_mean(ref, sorted(known))
    return f"did you mean `{guess}`?" if guess else None


def changelog_order(c: Contract) -> Iterator[Issue]:
    """CHANGELOG-ORDER: versions must strictly decrease from the first entry to the last."""
    for newer, older in zip(c.changelog, c.changelog[1:], strict=False):
        v_new, v_old = semver.parse(newer.version), semver.parse(older.version)
        if v_new and v_old and not v_new > v_old:
            yield Issue(
                "CHANGELOG-ORDER",
                (*older.where, "version"),
                f"{older.version} is listed below {newer.version} but is not older",
            )


def changelog_matches_version(c: Contract) -> Iterator[Issue]:
    """CHANGELOG-VERSION: the newest entry documents metadata.version."""
    newest = c.changelog[0]
    if newest.version != c.metadata.version:
        yield Issue(
            "CHANGELOG-VERSION",
            (*newest.where, "version"),
            f"newest changelog entry is {newest.version}, metadata.version is {c.metadata.version}",
            f"add a changelog entry for {c.metadata.version} at the top",
        )


def changelog_gaps(c: Contract) -> Iterator[Issue]:
    """CHANGELOG-GAP: every release between the first and the newest is recorded."""
    for newer, older in zip(c.changelog, c.changelog[1:], strict=False):
        v_new, v_old = semver.parse(newer.version), semver.parse(older.version)
        if v_new and v_old and v_new > v_old and not semver.is_next_release(v_old, v_new):
            yield Issue(
                "CHANGELOG-GAP",
                (*newer.where, "version"),
                f"{newer.version} follows {older.version}: the releases between "
                "them are missing from the changelog",
            )


def _date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def _all_dates(c: Contract) -> Iterator[tuple[tuple, str]]:
    yield ("metadata", "created"), c.metadata.created
    yield ("metadata", "updated"), c.metadata.updated
    for e in c.changelog:
        yield (*e.where, "date"), e.date


def real_dates(c: Contract) -> Iterator[Issue]:
    """DATE-FORMAT: YYYY-MM-DD that is a real calendar day (no 2026-02-30)."""
    for where, text in _all_dates(c):
        if _date(text) is None:
            yield Issue("DATE-FORMAT", where, f"{text!r} is not a calendar date", at_key=False)


def latest_date_on_earth() -> dt.date:
    # UTC+14 is the earliest time zone: a date is only "future" once it is future everywhere.
    return (dt.datetime.now(dt.UTC) + dt.timedelta(hours=14)).date()


def future_dates(c: Contract, today: dt.date) -> Iterator[Issue]:
    """DATE-FUTURE: no date after today."""
    for where, text in _all_dates(c):
        d = _date(text)
        if d is not None and d > today:
            yield Issue(
                "DATE-FUTURE", where, f"{text} is in the future (today is {today})", at_key=False
            )


def created_before_updated(c: Contract) -> Iterator[Issue]:
    """DATE-ORDER: created ≤ updated."""
    created, updated = _date(c.metadata.created), _date(c.metadata.updated)
    if created and updated and updated < created:
        yield Issue(
            "DATE-ORDER",
            ("metadata", "updated"),
            f"updated {updated} is before created {created}",
            at_key=False,
        )


def changelog_dates(c: Contract) -> Iterator[Issue]:
    """CHANGELOG-DATE: entry dates go newest first; newest == updated; none before created."""
    created, updated = _date(c.metadata.created), _date(c.metadata.updated)
    dates = [_date(e.date) for e in c.changelog]
    if updated and dates[0] and dates[0] != updated:
        yield Issue(
            "CHANGELOG-DATE",
            (*c.changelog[0].where, "date"),
            f"newest entry is dated {dates[0]} but metadata.updated is {updated}",
            "set metadata.updated to the date of the newest change",
            at_key=False,
        )
    for k in range(1, len(dates)):
        if dates[k] and dates[k - 1] and dates[k] > dates[k - 1]:
            yield Issue(
                "CHANGELOG-DATE",
                (*c.changelog[k].where, "date"),
                f"{c.changelog[k].version} is dated {dates[k]}, after the newer "
                f"{c.changelog[k - 1].version} ({dates[k - 1]})",
                at_key=False,
            )
    for e, d in zip(c.changelog, dates, strict=True):
        if created and d and d < created:
            yield Issue(
                "CHANGELOG-DATE",
                (*e.where, "date"),
                f"{e.version} is dated {d}, before the contract was created ({created})",
                at_key=False,
            )


_MAJOR_SUFFIX = re.compile(r"-v(\d+)$")


def filename_major(c: Contract) -> Iterator[Issue]:
    """VERSION-FILENAME / STYLE-FILENAME: `name-vN.yaml` agrees with metadata.version."""
    m = _MAJOR_SUFFIX.search(Path(c.path).stem)
    version = semver.parse(c.metadata.version)
    if m is None:
        yield Issue(
            "STYLE-FILENAME",
            ("metadata", "version"),
            f"{Path(c.path).name} has no -v<major> suffix",
        )
    elif version and int(m.group(1)) != version.major:
        yield Issue(
            "VERSION-FILENAME",
            ("metadata", "version"),
            f"{Path(c.path).name} says v{m.group(1)} but metadata.version is {c.metadata.version}",
            at_key=False,
        )


def gate_tests_bound(c: Contract) -> Iterator[Issue]:
    """GATE-UNBOUND-TEST: a gate at PASS or PARTIAL rests only on bound tests."""
    for gate in c.gates:
        if gate.status not in ("PASS", "PARTIAL"):
            continue
        for k, ref in enumerate(gate.falsification_tests):
            test = c.test(ref)
            if test is not None and not test.bound:
                yield Issue(
                    "GATE-UNBOUND-TEST",
                    (*gate.where, "falsification_tests", k),
                    f"{gate.id} is {gate.status} but {ref} is only planned",
                )


def partial_gates_explained(c: Contract) -> Iterator[Issue]:
    """GATE-PARTIAL-NOTE: PARTIAL says what is discharged and what full discharge waits for."""
    for gate in c.gates:
        if gate.status == "PARTIAL" and (not gate.partial_note or not gate.blocks_on):
            missing = [
                k
                for k, v in (("partial_note", gate.partial_note), ("blocks_on", gate.blocks_on))
                if not v
            ]
            yield Issue(
                "GATE-PARTIAL-NOTE",
                (*gate.where, "status"),
                f"{gate.id} is PARTIAL without {' and '.join(missing)}",
            )


def orphan_tests(c: Contract) -> Iterator[Issue]:
    """STYLE-ORPHAN-TEST: every falsification test attacks an invariant or backs a gate."""
    used = {r for i in c.invariants for r in i.falsified_by}
    used |= {r for g in c.gates for r in g.falsification_tests}
    for t in c.falsification_tests:
        if t.id not in used:
            yield Issue("STYLE-ORPHAN-TEST", (*t.where, "id"), f"{t.id} is referenced by nothing")


def bound_tests_name_mutants(c: Contract) -> Iterator[Issue]:
    """STYLE-NO-MUTANTS: a bound test says which known bugs it catches. (Behind a
    ship-blocking gate this is the error MUTANT-MISSING instead, reported once.)"""
    blocking = {ref for g in c.gates if g.ship_blocking for ref in g.falsification_tests}
    for t in c.falsification_tests:
        if t.bound and not t.mutants and t.id not in blocking:
            yield Issue("STYLE-NO-MUTANTS", (*t.where, "id"), f"{t.id} names no mutants")


def ungated_invariants(c: Contract) -> Iterator[Issue]:
    """STYLE-UNGATED-INVARIANT: some gate rests on at least one test of each invariant."""
    gated = {r for g in c.gates for r in g.falsification_tests}
    for inv in c.invariants:
        if not gated.intersection(inv.falsified_by):
            yield Issue(
                "STYLE-UNGATED-INVARIANT",
                (*inv.where, "id"),
                f"no gate rests on any test of {inv.id}",
            )


def all_issues(c: Contract, today: dt.date) -> Iterator[Issue]:
    checks: list[Callable[[Contract], Iterator[Issue]]] = [
        duplicate_ids,
        dangling_test_refs,
        changelog_order,
        changelog_matches_version,
        changelog_gaps,
        real_dates,
        created_before_updated,
        changelog_dates,
        filename_major,
        gate_tests_bound,
        partial_gates_explained,
        orphan_tests,
        bound_tests_name_mutants,
        ungated_invariants,
    ]
    for check in checks:
        yield from check(c)
    yield from future_dates(c, today)


__all__ = ["all_issues", "latest_date_on_earth"]
