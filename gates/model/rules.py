"""Every rule `pv validate` can report: id, severity, one-line summary and default fix hint.

Checkers yield :class:`gates.model.findings.Issue` objects naming a rule id from this table; the
table is the one place where severities and hints live, so ``pv rules`` and the docs agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    severity: Severity
    summary: str
    hint: str


_E, _W = Severity.ERROR, Severity.WARNING

RULES: dict[str, Rule] = {
    r.id: r
    for r in [
        # Reading the file.
        Rule(
            "FILE-NOT-REGULAR",
            _E,
            "the path is a FIFO, device, socket, symlink loop or dangling symlink",
            "point pv at a regular .yaml file, or remove what stands in its place",
        ),
        Rule("FILE-EMPTY", _E, "the file holds no YAML document", "write a contract mapping"),
        Rule(
            "FILE-BINARY", _E, "the file is binary, not YAML text", "point pv at a .yaml contract"
        ),
        Rule("FILE-ENCODING", _E, "the file is not valid UTF-8", "re-save the file as UTF-8"),
        Rule(
            "FILE-TOO-LARGE",
            _E,
            "the file exceeds the contract size limit",
            "split the contract; contracts are kilobytes, not megabytes",
        ),
        Rule("YAML-SYNTAX", _E, "the YAML does not parse", "fix the syntax at the position shown"),
        Rule(
            "YAML-TAB",
            _E,
            "a tab character is used for indentation",
            "indent YAML with spaces only",
        ),
        Rule("YAML-DUPLICATE-KEY", _E, "a mapping repeats a key", "keep one of the two keys"),
        Rule(
            "YAML-ALIAS",
            _E,
            "YAML anchors/aliases are not allowed in contracts",
            "write the value out in full; aliases hide what a contract says",
        ),
        # Shape (JSON Schema).
        Rule("SCHEMA-TYPE", _E, "a value has the wrong type", "use the type the schema names"),
        Rule("SCHEMA-REQUIRED", _E, "a required key is missing", "add the key"),
        Rule(
            "SCHEMA-UNKNOWN-KEY",
            _E,
            "a key the contract format does not define",
            "remove it or fix its spelling",
        ),
        Rule("SCHEMA-ENUM", _E, "a value outside the allowed set", "use one of the listed values"),
        Rule("SCHEMA-EMPTY-TEXT", _E, "a text field is blank", "write the text"),
        Rule(
            "SCHEMA-VIOLATION",
            _E,
            "the value breaks the contract schema",
            "see gates/schemas/contract.schema.json",
        ),
        Rule(
            "ID-FORMAT",
            _E,
            "an id does not follow its pattern",
            "ids look like C-NAME, INV-NAME-001, FALSIFY-NAME-001, GATE-NAME-001, mutant-name",
        ),
        Rule(
            "TEST-NODE-FORMAT",
            _E,
            "a test binding is not a pytest node id",
            "write tests/path/test_file.py::test_name (or ::Class::test_name)",
        ),
        Rule(
            "TEST-BINDING",
            _E,
            "a planned falsification test names a test",
            "set status: bound when the test exists, or drop `test:`",
        ),
        Rule(
            "EVIDENCE-PATH",
            _E,
            "an evidence path is not evidence/<contract-id>/<GATE-ID>.json",
            "store evidence at evidence/<contract-id>/<GATE-ID>.json",
        ),
        # Versions and dates.
        Rule(
            "VERSION-SEMVER",
            _E,
            "a version is not semantic versioning (MAJOR.MINOR.PATCH)",
            "write e.g. 1.2.0",
        ),
        Rule(
            "VERSION-FILENAME",
            _E,
            "the file name's -vN suffix disagrees with the major version",
            "rename the file or fix metadata.version",
        ),
        Rule("DATE-FORMAT", _E, "a date is not a real YYYY-MM-DD date", "write e.g. 2026-11-22"),
        Rule("DATE-FUTURE", _E, "a date lies in the future", "use the date the change was made"),
        Rule(
            "DATE-ORDER",
            _E,
            "metadata.updated is before metadata.created",
            "updated must be on or after created",
        ),
        Rule(
            "CHANGELOG-ORDER",
            _E,
            "the changelog is not newest first",
            "list entries newest first, versions strictly decreasing",
        ),
        Rule(
            "CHANGELOG-VERSION",
            _E,
            "the newest changelog entry is not metadata.version",
            "add a changelog entry for the current version",
        ),
        Rule(
            "CHANGELOG-GAP",
            _E,
            "the changelog skips a version",
            "each entry must be the next patch, minor or major release of the one below it",
        ),
        Rule(
            "CHANGELOG-DATE",
            _E,
            "changelog dates disagree with each other or with metadata",
            "dates go newest first; the newest is metadata.updated; none before created",
        ),
        # Ids and references.
        Rule("ID-DUPLICATE", _E, "an id is defined twice", "ids are unique across all contracts"),
        Rule(
            "REF-DANGLING",
            _E,
            "a reference names an id that is not defined",
            "define the id or fix the reference",
        ),
        Rule(
            "DEPENDS-CYCLE",
            _E,
            "contracts depend on each other in a cycle",
            "break the cycle in metadata.depends_on",
        ),
        # Tests, markers, gates, evidence.
        Rule(
            "TEST-NOT-FOUND",
            _E,
            "a bound pytest node id does not exist",
            "fix the node id or write the test",
        ),
        Rule(
            "SHIP-BLOCKING-MARKER",
            _E,
            "a test bound to a ship-blocking gate lacks @pytest.mark.ship_blocking",
            "mark the test (or its class/module) with pytest.mark.ship_blocking",
        ),
        Rule(
            "MUTANT-MISSING",
            _E,
            "a bound test behind a ship-blocking gate names no mutant",
            "name the known bugs it catches under `mutants:` and implement them",
        ),
        Rule(
            "MUTANT-UNIMPLEMENTED",
            _E,
            "a mutant named by a test behind a ship-blocking gate has no implementation",
            'add @mutant("<id>") in a [tool.shipgate] mutants directory (docs/mutants.md)',
        ),
        Rule(
            "PROJECT-CONFIG",
            _E,
            "the project's [tool.shipgate] table in pyproject.toml is malformed",
            "list directories under mutants/measurements (docs/measurements.md)",
        ),
        Rule(
            "GATE-UNBOUND-TEST",
            _E,
            "a PASS/PARTIAL gate rests on a planned test",
            "bind the test before promoting the gate",
        ),
        Rule(
            "GATE-PARTIAL-NOTE",
            _E,
            "a PARTIAL gate lacks partial_note and blocks_on",
            "say what is and is not discharged, and what full discharge waits for",
        ),
        Rule(
            "EVIDENCE-MISSING",
            _E,
            "a PASS/PARTIAL/FAIL gate has no evidence file",
            "promote the gate with `gates promote`, which writes the evidence",
        ),
        Rule(
            "EVIDENCE-INVALID",
            _E,
            "an evidence file cannot be read as JSON (a special file, too large, not UTF-8, "
            "nested too deep) or is not valid evidence; the message names it",
            "regenerate it with `gates promote`; see gates/schemas/evidence.schema.json",
        ),
        Rule(
            "EVIDENCE-MISMATCH",
            _E,
            "an evidence file disagrees with its contract",
            "re-run `gates promote` or fix the gate to say what the evidence shows",
        ),
        Rule(
            "EVIDENCE-TESTS-NOT-PASSED",
            _E,
            "PASS/PARTIAL evidence does not record every bound test as passed",
            "re-measure with `gates promote`: it runs the gate's bound tests and records them",
        ),
        Rule(
            "EVIDENCE-DIRTY",
            _E,
            "evidence measured over uncommitted changes records no override reason",
            "commit and re-measure, or promote with `--allow-dirty REASON`",
        ),
        Rule(
            "EVIDENCE-COMMIT-UNKNOWN",
            _E,
            "the commit evidence records is not in the repository's history",
            "re-measure at a commit of this repository with `gates promote`",
        ),
        Rule(
            "EVIDENCE-NOT-AT-COMMIT",
            _E,
            "evidence recorded over a clean tree lists a source that the recorded commit does "
            "not hold as hashed (pointed at another commit, or dirty: false over changes)",
            "re-measure with `gates promote` at a clean checkout of the commit it records",
        ),
        Rule(
            "EVIDENCE-NOTHING-MEASURED",
            _E,
            "PASS/PARTIAL evidence whose sources do not include its measurement's module",
            "re-measure with `gates promote`: the run records every file it read",
        ),
        Rule(
            "EVIDENCE-ARTIFACT-MISSING",
            _E,
            "an artifact evidence names by path is not under the project root and has no recipe",
            "commit the artifact, record the recipe that rebuilds it, or re-measure",
        ),
        Rule(
            "EVIDENCE-ABSOLUTE-PATH",
            _E,
            "evidence records an absolute path of one machine",
            "record paths relative to the project root (re-measure with `gates promote`)",
        ),
        # Freshness: a warning, so `pv validate` still passes while code moves on; `pv status
        # --require-ship-ready` fails on it for a ship-blocking gate.
        Rule(
            "EVIDENCE-STALE",
            _W,
            "a PASS/PARTIAL gate's evidence records a source file that changed or is gone since "
            "it was measured, or records no sources",
            "re-measure with `gates promote GATE` (every stale gate: `gates promote --stale`)",
        ),
        # The committed mutation audit (evidence/audit/audit.json), when the project has one.
        Rule(
            "AUDIT-INVALID",
            _E,
            "the project's audit file is unreadable or not a valid `gates audit` record",
            "re-run the audit (`make audit`, or `gates audit --out evidence/audit/audit.json`)",
        ),
        Rule(
            "AUDIT-NOT-OK",
            _E,
            "the committed audit records a failure: the real code failing its test, or a "
            "mutant that survived, timed out or was not viable (runtime error)",
            "make the test catch the mutant (or fix its seam), then re-run the audit",
        ),
        Rule(
            "AUDIT-MISSING",
            _E,
            "the project's audit lists a contract as audited but holds no row of it",
            "re-run the audit (`make audit`): rows are never removed by hand",
        ),
        Rule(
            "AUDIT-STALE",
            _W,
            "a file a test's audited runs read changed since the audit, or a bound test or "
            "mutant has no row in it",
            "re-run the audit (`make audit`) and commit evidence/audit/audit.json",
        ),
        # Style (warnings never fail a run).
        Rule(
            "STYLE-FILENAME",
            _W,
            "the file name does not end in -v<major>.yaml",
            "name contracts like training-loop-v1.yaml",
        ),
        Rule(
            "STYLE-ORPHAN-TEST",
            _W,
            "a falsification test attacks no invariant and backs no gate",
            "reference it from an invariant's falsified_by or a gate",
        ),
        Rule(
            "STYLE-NO-MUTANTS",
            _W,
            "a bound falsification test names no mutants",
            "name the known bugs the test exists to catch",
        ),
        Rule(
            "STYLE-UNGATED-INVARIANT",
            _W,
            "no gate rests on any test of this invariant",
            "add a gate so the invariant can block a ship",
        ),
        # The tool itself.
        Rule(
            "PV-INTERNAL",
            _E,
            "pv failed on this file (a bug in pv)",
            "re-run with --debug and report the traceback",
        ),
    ]
}


def rule(rule_id: str) -> Rule:
    """Look up a rule; an unknown id is a programming error in a checker."""
    return RULES[rule_id]


def about_recorded_evidence(rule_id: str) -> bool:
    """A finding about what evidence or the audit recorded (EVIDENCE-*, AUDIT-*): re-measuring
    is what fixes it, so `gates check`/`promote`/`audit` do not refuse on it. A contract
    error (schema, references, bound tests) still stops them."""
    return rule_id.startswith(("EVIDENCE-", "AUDIT-"))
