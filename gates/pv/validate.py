"""`pv validate`: load contracts, check schema, semantics, project and cross-file rules.

Pipeline per file: read (source errors) → JSON Schema → typed model → contract rules →
project rules (tests, markers, evidence). Semantic rules run only on schema-valid files,
so they never see a wrongly-typed document. Then cross-file rules over the valid ones.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gates.model.contract import Contract
from gates.model.findings import Finding, Issue, Report, make_finding
from gates.model.schema import schema_issues
from gates.model.source import (
    SourceError,
    UnreadablePathError,
    YamlSource,
    declared_id,
    read_yaml,
)
from gates.provenance.git_history import CommitIndex
from gates.pv.checks import contract_rules, crossfile_rules, project_rules
from gates.pv.pytest_nodes import NodeIndex


def resolved(path: Path) -> Path:
    """``path`` absolute, its symlinks resolved as far as they go: a symlink loop stops the
    resolution instead of raising (Path.resolve raises RuntimeError for one on 3.11)."""
    return Path(os.path.realpath(path))


def find_root(path: Path) -> Path:
    """The project a contract belongs to: the nearest ancestor holding pyproject.toml.

    Any entry of that name counts, regular or not, so that a pyproject.toml that cannot be
    read is reported (PROJECT-CONFIG) rather than passed over for an outer project's."""
    for parent in resolved(path).parents:
        if os.path.lexists(parent / "pyproject.toml"):
            return parent
    return resolved(path).parent


@dataclass
class Validation:
    report: Report = field(default_factory=Report)
    contracts: list[Contract] = field(default_factory=list)
    #: Paths that could not be read at all (usage / I-O errors, exit 2).
    unreadable: list[str] = field(default_factory=list)
    #: What pv could not check here and says so rather than pass in silence (no git history).
    notes: list[str] = field(default_factory=list)


def _sibling_contract_ids(paths: Iterable[Path], given: set[Path]) -> set[str]:
    """Ids of contracts beside the given files, so depends_on may point at them. A sibling
    that cannot be read (a FIFO, a symlink loop, bad YAML before its id) names no id;
    declared_id opens only regular files, so none of them blocks or floods the scan, and
    reads each no further than its id."""
    ids: set[str] = set()
    for directory in {resolved(p).parent for p in paths}:
        for sibling in sorted(directory.glob("*.yaml")):
            if resolved(sibling) not in given and (found := declared_id(sibling)) is not None:
                ids.add(found)
    return ids


def validate(
    paths: list[Path],
    *,
    root: Path | None = None,
    today: dt.date | None = None,
    debug: bool = False,
) -> Validation:
    """Validate contract files; never raises on bad content (only with ``debug`` on bugs)."""
    today = today or contract_rules.latest_date_on_earth()
    result = Validation()
    sources: dict[Path, YamlSource] = {}
    indexes: dict[Path, NodeIndex] = {}
    commits: dict[Path, CommitIndex] = {}  # one batch of git look-ups per root and run

    for path in paths:
        display = str(path)
        try:
            source = read_yaml(path)
        except UnreadablePathError as exc:
            result.unreadable.append(str(exc))
            continue
        except SourceError as exc:
            result.report.files.append(display)
            result.report.extend(
                [make_finding(Issue(exc.rule, (), exc.message), display, exc.line, exc.column)]
            )
            continue
        result.report.files.append(display)
        try:
            findings, contract = _check_one(
                source, root or find_root(path), today, indexes, commits
            )
        except Exception as exc:
            if debug:
                raise
            findings, contract = (
                [
                    make_finding(
                        Issue("PV-INTERNAL", (), f"{type(exc).__name__}: {exc}"), display, 1, 1
                    )
                ],
                None,
            )
        result.report.extend(findings)
        if contract is not None:
            result.contracts.append(contract)
            sources[contract.path] = source

    known = {c.id for c in result.contracts}
    known |= _sibling_contract_ids(paths, {resolved(p) for p in paths})
    cross = [
        *crossfile_rules.global_duplicate_ids(result.contracts),
        *crossfile_rules.dangling_dependencies(result.contracts, known),
        *crossfile_rules.dependency_cycles(result.contracts),
    ]
    for contract, issue in cross:
        result.report.extend([_locate(sources[contract.path], issue)])
    for project_root, index in commits.items():
        if index.unusable_reason:
            result.notes.append(
                f"{project_root}: git cannot tell here, {index.unusable_reason}: evidence "
                "commits and sources at them were not checked (EVIDENCE-COMMIT-UNKNOWN, "
                "EVIDENCE-NOT-AT-COMMIT)"
            )
    return result


def _locate(source: YamlSource, issue: Issue) -> Finding:
    line, column = source.locate(issue.where, at_key=issue.at_key)
    return make_finding(issue, str(source.path), line, column)


def _check_one(
    source: YamlSource,
    root: Path,
    today: dt.date,
    indexes: dict[Path, NodeIndex],
    commits: dict[Path, CommitIndex],
) -> tuple[list[Finding], Contract | None]:
    issues = schema_issues(source.data)
    if issues:
        return [_locate(source, i) for i in issues], None
    contract = Contract.from_data(source.path, source.data)
    nodes = indexes.setdefault(root, NodeIndex(root))
    issues = [
        *contract_rules.all_issues(contract, today),
        *project_rules.all_issues(
            contract, root, nodes, commits.setdefault(root, CommitIndex(root))
        ),
    ]
    return [_locate(source, i) for i in issues], contract
