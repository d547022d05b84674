"""Gate evidence as an in-toto Statement (https://in-toto.io/Statement/v1): the shape supply-chain
tools (SLSA verifiers, cosign attestations, policy engines) already read.

Evidence is already a statement in all but layout: what it is *about* is content-addressed
(the artifacts measured and the repository files the measurement and tests read, each by
sha256), and what it *says* is typed (a gate's measurement against its thresholds). This
module only moves those parts into the Statement's places; nothing is added or dropped:

    subject        artifacts, then sources: {"name": path (or artifact name), "digest": {"sha256"}}
    predicateType  PREDICATE_TYPE (versioned with the evidence schema)
    predicate      every other field of the evidence file, unchanged

`evidence_of` is the inverse, so a consumer holding the Statement holds the evidence.
Signing (a DSSE envelope) is left to the tools that hold keys. evidence/schema/README.md
documents the mapping.
"""

from __future__ import annotations

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:shipgate:predicate:gate-evidence:1"

#: Evidence fields that become the Statement's subject (and come back from it).
_SUBJECT_FIELDS = ("artifacts", "sources")


def statement(evidence: dict) -> dict:
    """The in-toto Statement of one evidence record (schema-valid)."""
    subject = []
    for kind in _SUBJECT_FIELDS:
        for entry in evidence.get(kind, []):
            subject.append(
                {
                    "name": entry.get("path") or entry["name"],
                    "digest": {"sha256": entry["sha256"]},
                    "annotations": {"shipgate": {"field": kind, "entry": entry}},
                }
            )
    if not subject:
        raise ValueError(
            f"evidence of {evidence.get('gate')} names no artifact and no source: an in-toto "
            "Statement needs at least one subject (re-measure: evidence records its sources)"
        )
    predicate = {k: v for k, v in evidence.items() if k not in _SUBJECT_FIELDS}
    return {
        "_type": STATEMENT_TYPE,
        "subject": subject,
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def evidence_of(stmt: dict) -> dict:
    """The evidence record a Statement from :func:`statement` carries."""
    if stmt.get("_type") != STATEMENT_TYPE or stmt.get("predicateType") != PREDICATE_TYPE:
        raise ValueError("not a shipgate gate-evidence Statement")
    evidence = dict(stmt["predicate"])
    for kind in _SUBJECT_FIELDS:
        entries = [
            s["annotations"]["shipgate"]["entry"]
            for s in stmt["subject"]
            if s["annotations"]["shipgate"]["field"] == kind
        ]
        if entries or kind == "artifacts":
            evidence[kind] = entries
    return evidence
