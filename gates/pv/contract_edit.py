"""Edit a contract in place, line by line, so a promotion's diff is only the lines it means.

ruamel supplies positions; the text is changed surgically: the gate's status and evidence
lines, metadata.version, metadata.updated, and a new changelog entry on top. Comments,
key order, quoting and wrapping everywhere else stay byte-for-byte as they were.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from pathlib import Path

from gates.model import semver
from gates.model.contract import Contract
from gates.model.schema import schema_issues
from gates.model.source import SourceError, parse_yaml
from gates.pv.checks import contract_rules


class EditError(Exception):
    """The contract cannot be edited safely (unexpected layout, or the result is invalid)."""


@dataclass(frozen=True)
class GateEdit:
    gate_id: str
    status: str
    #: New evidence path; None removes the evidence line.
    evidence: str | None
    changelog_text: str
    today: dt.date


def _value_line(lines: list[str], idx: int, key: str, value: str) -> str:
    m = re.match(rf"^(\s*(?:-\s+)?{re.escape(key)}:[ \t]*)(\S.*?)?([ \t]+#.*)?$", lines[idx])
    if not m or not m.group(2) or m.group(2)[0] in "|>":
        raise EditError(f"line {idx + 1}: `{key}:` is not a one-line value; edit it by hand")
    return m.group(1) + value + (m.group(3) or "")


def next_version(current: str) -> str:
    v = semver.parse(current)
    if v is None:
        raise EditError(f"metadata.version {current!r} is not semver")
    return str(v.bump("minor"))


def apply(text: str, path: Path, edit: GateEdit) -> tuple[str, str]:
    """Return (new text, new version) for ``edit``; raise EditError if anything is off."""
    try:
        src = parse_yaml(text, path)
    except SourceError as exc:
        raise EditError(f"{path}:{exc.line}: {exc.message}") from None
    tree, lines = src.tree, text.splitlines(keepends=True)
    gates = tree.get("gates") or []
    index = next((n for n, g in enumerate(gates) if g.get("id") == edit.gate_id), None)
    if index is None:
        raise EditError(f"{path} has no gate {edit.gate_id}")
    gate = gates[index]
    md = tree["metadata"]
    new_version = next_version(str(md["version"]))
    newest = contract_rules._date(str(tree["changelog"][0]["date"]))
    day = max(edit.today, newest) if newest else edit.today

    # Edits as (line index, replacement lines); applied bottom-up so indexes stay valid.
    edits: list[tuple[int, int, list[str]]] = []  # (start, lines removed, new lines)

    def nl(i: int) -> str:
        return "\n" if lines[i].endswith("\n") else ""

    def replace(i: int, key: str, value: str) -> None:
        edits.append((i, 1, [_value_line(lines, i, key, value) + nl(i)]))

    status_line, status_col = gate.lc.key("status")
    replace(status_line, "status", edit.status)
    if "evidence" in gate:
        ev_line = gate.lc.key("evidence")[0]
        if edit.evidence is None:
            edits.append((ev_line, 1, []))
        else:
            replace(ev_line, "evidence", edit.evidence)
    elif edit.evidence is not None:
        edits.append((status_line + 1, 0, [" " * status_col + f"evidence: {edit.evidence}\n"]))
    replace(md.lc.key("version")[0], "version", new_version)
    replace(md.lc.key("updated")[0], "updated", day.isoformat())
    first_line, first_col = tree["changelog"].lc.item(0)
    dash = lines[first_line].index("-")
    pad = " " * first_col
    entry = [
        " " * dash + "-" + " " * (first_col - dash - 1) + f"version: {new_version}\n",
        f"{pad}date: {day.isoformat()}\n",
        f"{pad}text: {json.dumps(edit.changelog_text, ensure_ascii=False)}\n",
    ]
    edits.append((first_line, 0, entry))

    for start, removed, new in sorted(edits, key=lambda e: e[0], reverse=True):
        lines[start : start + removed] = new
    new_text = "".join(lines)
    _check_result(new_text, path)
    return new_text, new_version


def _check_result(text: str, path: Path) -> None:
    """The edited contract must still be a valid contract on its own (evidence aside)."""
    src = parse_yaml(text, path)
    issues = schema_issues(src.data)
    if not issues:
        contract = Contract.from_data(path, src.data)
        issues = [
            i
            for i in contract_rules.all_issues(contract, contract_rules.latest_date_on_earth())
            if not i.rule.startswith("STYLE-")
        ]
    if issues:
        first = issues[0]
        line, _ = src.locate(first.where)
        raise EditError(f"the edit would leave {path}:{line} invalid: {first.rule} {first.message}")
