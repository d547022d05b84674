"""The plan as data: sections, each with a verdict, its numbers and its findings.

Checkers build :class:`Section` objects and never print; :func:`render_text` and
:func:`render_json` turn a :class:`PlanReport` into the two output formats. A section's
verdict follows from its findings (an error makes it FAIL, a warning makes it warn)
unless it was skipped, which always carries the reason.

JSON keys are stable: ``config``, ``verdict``, ``exit_code``, ``what_if`` and
``sections`` holding every key of :data:`SECTION_KEYS`, each with ``title``,
``verdict``, ``values``, ``details`` and ``findings``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from trainer import exit_codes

Level = Literal["error", "warning"]
Verdict = Literal["ok", "warn", "FAIL", "skipped"]

#: Section keys in the order they are printed (and in the JSON object).
SECTION_KEYS = (
    "config",
    "architecture",
    "parameters",
    "memory",
    "algebra",
    "data",
    "tokenizer",
    "time",
)
SECTION_TITLES = {
    "config": "config",
    "architecture": "architecture",
    "parameters": "parameters",
    "memory": "memory budget",
    "algebra": "step algebra (C-TRAINCFG-001)",
    "data": "data",
    "tokenizer": "tokenizer",
    "time": "time estimate",
}


@dataclass(frozen=True)
class Finding:
    """One problem: ``field`` is a dotted YAML path, ``line`` its 1-based line when known."""

    level: Level
    message: str
    field: str | None = None
    line: int | None = None
    hint: str | None = None

    def as_dict(self) -> dict:
        return {
            "level": self.level,
            "field": self.field,
            "line": self.line,
            "message": self.message,
            "hint": self.hint,
        }


@dataclass
class Section:
    key: str
    #: Numbers and facts, JSON-serializable, stable names (bytes, counts, seconds).
    values: dict = field(default_factory=dict)
    #: Human-readable lines: formulas next to numbers, measurement bases.
    details: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    skipped: str | None = None  # the reason, when the section could not run

    @property
    def title(self) -> str:
        return SECTION_TITLES[self.key]

    @property
    def verdict(self) -> Verdict:
        if any(f.level == "error" for f in self.findings):
            return "FAIL"
        if self.skipped is not None:
            return "skipped"
        if any(f.level == "warning" for f in self.findings):
            return "warn"
        return "ok"

    def error(
        self, message: str, field: str | None = None, line: int | None = None, hint: str = ""
    ) -> None:
        self.findings.append(Finding("error", message, field, line, hint or None))

    def warning(
        self, message: str, field: str | None = None, line: int | None = None, hint: str = ""
    ) -> None:
        self.findings.append(Finding("warning", message, field, line, hint or None))

    def as_dict(self) -> dict:
        return {
            "title": self.title,
            "verdict": self.verdict,
            "skipped": self.skipped,
            "values": self.values,
            "details": self.details,
            "findings": [f.as_dict() for f in self.findings],
        }


@dataclass
class PlanReport:
    config: str  # the config path as given
    sections: dict[str, Section]
    what_if: bool = False  # --sequences replaced the counted sequences

    @property
    def failed(self) -> bool:
        return any(s.verdict == "FAIL" for s in self.sections.values())

    @property
    def verdict(self) -> Verdict:
        verdicts = {s.verdict for s in self.sections.values()}
        if "FAIL" in verdicts:
            return "FAIL"
        return "warn" if "warn" in verdicts else "ok"

    @property
    def exit_code(self) -> int:
        return exit_codes.FINDINGS if self.failed else exit_codes.OK


def _location(config: str, finding: Finding) -> str:
    where = f"{config}:{finding.line}" if finding.line is not None else config
    return f"{where}: {finding.field}: " if finding.field else f"{where}: "


def render_text(report: PlanReport) -> str:
    lines = [f"trainer plan {report.config}"]
    if report.what_if:
        lines.append(
            "WHAT-IF: the sequence count comes from --sequences, not from the shard manifest"
        )
    for key in SECTION_KEYS:
        section = report.sections[key]
        if section.verdict == "skipped" and not section.details:
            if not lines[-1].startswith("[skipped]"):
                lines.append("")
            lines.append(f"[skipped] {section.title}: {section.skipped}")
            continue
        lines.append("")
        lines.append(f"[{section.verdict}] {section.title}")
        if section.skipped is not None:
            lines.append(f"    skipped: {section.skipped}")
        lines.extend(f"    {line}" for line in section.details)
        for finding in section.findings:
            tag = "error" if finding.level == "error" else "warning"
            lines.append(f"  {tag}: {_location(report.config, finding)}{finding.message}")
            if finding.hint:
                lines.append(f"      hint: {finding.hint}")
    errors = sum(f.level == "error" for s in report.sections.values() for f in s.findings)
    warnings = sum(f.level == "warning" for s in report.sections.values() for f in s.findings)
    lines.append("")
    lines.append(f"plan: {report.verdict} ({errors} errors, {warnings} warnings)")
    return "\n".join(lines)


def render_json(report: PlanReport) -> str:
    return json.dumps(
        {
            "config": report.config,
            "verdict": report.verdict,
            "exit_code": report.exit_code,
            "what_if": report.what_if,
            "sections": {key: report.sections[key].as_dict() for key in SECTION_KEYS},
        },
        indent=2,
    )
