"""Render a validation report as text (humans), JSON (scripts) or GitHub annotations (CI)."""

from __future__ import annotations

import json

from gates.model.findings import Report

FORMATS = ("text", "json", "github")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary_line(report: Report) -> str:
    e, w, f = len(report.errors), len(report.warnings), len(report.files)
    if not e:
        return f"pv: {_plural(f, 'file')} valid ({_plural(w, 'warning')})"
    return f"pv: {_plural(e, 'error')}, {_plural(w, 'warning')} in {_plural(f, 'file')}"


def render_text(report: Report) -> str:
    lines = []
    for f in report.sorted():
        lines.append(f"{f.file}:{f.line}:{f.column}: {f.severity.value} {f.rule}: {f.message}")
        lines.append(f"    fix: {f.hint}")
    lines.append(summary_line(report))
    return "\n".join(lines)


def render_json(report: Report) -> str:
    return json.dumps(
        {
            "files": report.files,
            "findings": [f.to_json() for f in report.sorted()],
            "summary": {
                "files": len(report.files),
                "errors": len(report.errors),
                "warnings": len(report.warnings),
            },
        },
        indent=2,
    )


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render_github(report: Report) -> str:
    # GitHub Actions workflow commands (::error / ::warning) become inline annotations.
    lines = [
        f"::{f.severity.value} file={_escape_property(f.file)},line={f.line},col={f.column},"
        f"title={_escape_property(f.rule)}::{_escape_data(f'{f.message} (fix: {f.hint})')}"
        for f in report.sorted()
    ]
    lines.append(summary_line(report))
    return "\n".join(lines)


def render(report: Report, fmt: str) -> str:
    return {"text": render_text, "json": render_json, "github": render_github}[fmt](report)
