"""Findings: what a checker reports (`Issue`) and what a user sees (`Finding`).

Checkers are pure: they yield :class:`Issue` with a path *inside* the document
(``("gates", 2, "threshold")``). The validator turns each into a :class:`Finding`
by adding the file, line and column, and the rule's severity and default hint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from gates.io.jsonpath import json_path
from gates.model.rules import Severity, rule

#: A path into a YAML document: mapping keys and list indexes.
DocPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Issue:
    rule: str
    where: DocPath
    message: str
    hint: str | None = None
    #: Point at the key itself rather than its value (unknown keys, duplicate keys).
    at_key: bool = True


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    severity: Severity
    message: str
    hint: str
    file: str
    line: int
    column: int
    json_path: str = "$"

    def to_json(self) -> dict:
        d = asdict(self)
        d["severity"] = self.severity.value
        return d


def make_finding(issue: Issue, file: str, line: int, column: int) -> Finding:
    r = rule(issue.rule)
    return Finding(
        rule=r.id,
        severity=r.severity,
        message=issue.message,
        hint=issue.hint or r.hint,
        file=file,
        line=line,
        column=column,
        json_path=json_path(issue.where),
    )


@dataclass
class Report:
    """All findings of one `pv validate` run, in file and line order."""

    files: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def extend(self, findings: Iterable[Finding]) -> None:
        self.findings.extend(findings)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.WARNING]

    def sorted(self) -> list[Finding]:
        order = {f: i for i, f in enumerate(self.files)}
        return sorted(
            self.findings, key=lambda f: (order.get(f.file, len(order)), f.file, f.line, f.column)
        )
