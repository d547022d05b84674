"""The committed mutation audit file: where it lives and how it is read back. Kept apart from
gates.audit.bound_tests (which runs pytest) so that pv and the report read it without importing
pytest."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator

from gates.io import jsonfile
from gates.io.jsonpath import json_path
from gates.provenance import evidence

AUDIT_SCHEMA = evidence.EVIDENCE_SCHEMA.parent / "audit.schema.json"
#: Where `make audit` writes the project's audit, committed beside the gates' evidence; pv
#: and the report read it from there.
AUDIT_EVIDENCE = Path("evidence") / "audit" / "audit.json"
#: An audit file is kilobytes to a few megabytes; far more is not an audit.
MAX_AUDIT_BYTES = 64 * 1024 * 1024


class AuditFileError(Exception):
    """An audit file is unreadable, not JSON, or not valid against the audit schema."""


def load_record(path: Path) -> dict:
    """Read and schema-check an audit file (only a regular file, bounded), or raise
    AuditFileError saying why."""
    try:
        data = jsonfile.read_json(path, MAX_AUDIT_BYTES)
    except FileNotFoundError as exc:
        raise AuditFileError(f"audit file {path}: {exc.strerror}") from None
    except jsonfile.JsonFileError as exc:  # a FIFO, too large, not UTF-8, not JSON, too deep
        raise AuditFileError(f"audit file {exc}") from None
    validator = Draft202012Validator(json.loads(AUDIT_SCHEMA.read_text(encoding="utf-8")))
    errors = sorted(validator.iter_errors(data), key=lambda err: list(err.path))
    if errors:
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise AuditFileError(
            f"audit file {path}: not a gates audit file: {json_path(errors[0].path)}: "
            f"{errors[0].message}{more}"
        )
    return data
