"""What `gates report` reads, checked before anything is written: each gate's evidence, the
mutation audit, the plots, and whether --out may be replaced.

Every problem is a ReportError whose message names the file; the command then writes nothing.

    inputs = gather(contracts, Path("report.html"), plots=[Path("runs/demo/plots/loss.svg")])
    files.atomic_write_bytes(Path("report.html"), gates.report.page.render(inputs).encode())
"""

from __future__ import annotations

import os
import struct
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path, PurePath
from urllib.parse import quote

from gates.audit.bound_tests import AuditRow
from gates.io import files
from gates.model.contract import Contract
from gates.provenance import audit_record, evidence
from gates.pv.staleness import staleness
from gates.pv.validate import find_root
from gates.report.page import MARKER, Audit, AuditEntry, GateEvidence, Plot, ReportInputs

#: Where `make audit` writes the audit; read by default when it exists.
DEFAULT_AUDIT = audit_record.AUDIT_EVIDENCE
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG_ROOT = "{http://www.w3.org/2000/svg}svg"
MARKER_WITHIN = 4096  # the marker sits in <head>, within the page's first bytes
#: Largest audit file or plot read: both are kilobytes to a few megabytes; a FIFO or a device
#: is refused outright (gates/io/files.py read_regular).
MAX_INPUT_BYTES = 64 * 1024 * 1024


class ReportError(Exception):
    """An input the report cannot show truthfully, or an --out it must not replace."""


def href(target: Path, base_dir: Path) -> str:
    """A relative URL from a page in ``base_dir`` to ``target`` (both made absolute)."""
    rel = os.path.relpath(target.resolve(), base_dir.resolve())
    return quote(PurePath(rel).as_posix())


def shown(path: Path, root: Path) -> str:
    """``path`` relative to the project root when it is inside it, else as given."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def load_evidence(contracts: Sequence[Contract], root: Path, base_dir: Path) -> dict:
    """Each gate's evidence file (gate id -> GateEvidence), schema-checked."""
    out: dict[str, GateEvidence] = {}
    for c in contracts:
        for g in c.gates:
            if not g.evidence:
                continue
            path = root / g.evidence
            try:
                data = evidence.load(path)
            except evidence.EvidenceError as exc:
                raise ReportError(f"evidence of {g.id}: {exc}") from None
            out[g.id] = GateEvidence(href(path, base_dir), shown(path, root), data)
    return out


def _audit_json(path: Path) -> dict:
    try:
        return audit_record.load_record(path)
    except audit_record.AuditFileError as exc:
        raise ReportError(str(exc)) from None


def load_audit(path: Path, root: Path, base_dir: Path, *, defaulted: bool) -> Audit:
    """A `gates audit --out` file, schema-checked and self-consistent: each verdict is the one
    its outcome gives, no run is listed twice, and the totals are the rows' totals."""
    data = _audit_json(path)
    entries: dict[tuple[str, str, str | None], AuditEntry] = {}
    for n, r in enumerate(data["rows"]):
        row = AuditRow(r["contract"], r["test"], r["node"], r["mutant"], r["outcome"], 0.0)
        where = f"audit file {path}: rows[{n}] ({r['test']} {r['mutant'] or '(real code)'})"
        if r["verdict"] != row.verdict:
            raise ReportError(
                f"{where}: verdict {r['verdict']!r} but outcome {r['outcome']!r} "
                f"means {row.verdict!r}"
            )
        key = (row.contract, row.test_id, row.mutant)
        if key in entries:
            raise ReportError(f"{where}: this run is listed twice")
        entries[key] = AuditEntry(row.node, row.outcome, row.verdict)
    mutant_rows = [r for r in data["rows"] if r["mutant"] is not None]
    killed = sum(r["verdict"] == "killed" for r in mutant_rows)
    ok = all(r["verdict"] in ("passes", "killed") for r in data["rows"])
    totals = (data["mutants"], data["killed"], data["ok"])
    if totals != (len(mutant_rows), killed, ok):
        raise ReportError(
            f"audit file {path}: totals (mutants, killed, ok) = {totals} but its rows give "
            f"{(len(mutant_rows), killed, ok)}"
        )
    return Audit(
        shown_path=shown(path, root),
        href=href(path, base_dir),
        defaulted=defaulted,
        captured_at=data["captured_at"],
        commit=data["git"]["commit"],
        dirty=data["git"]["dirty"],
        mutants=data["mutants"],
        killed=data["killed"],
        ok=data["ok"],
        entries=entries,
    )


def _png_size(data: bytes) -> tuple[int, int] | None:
    if not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR" or len(data) < 24:
        return None
    return struct.unpack(">II", data[16:24])


def load_plot(path: Path) -> Plot:
    """An SVG (well-formed XML whose root is <svg>) or a PNG (signature and IHDR header)."""
    kind = path.suffix.lower()
    if kind not in (".svg", ".png"):
        raise ReportError(f"plot {path}: not .svg or .png")
    try:
        data = files.read_regular(path, MAX_INPUT_BYTES)
    except OSError as exc:
        raise ReportError(f"plot {path}: {exc.strerror or exc}") from None
    if kind == ".png":
        size = _png_size(data)
        if size is None or 0 in size:
            raise ReportError(f"plot {path}: not a PNG image (no PNG signature and header)")
        return Plot(str(path), "image/png", data)
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise ReportError(f"plot {path}: not well-formed XML ({exc})") from None
    if root.tag != SVG_ROOT:
        raise ReportError(f"plot {path}: XML whose root is <{root.tag}>, not an SVG <svg>")
    return Plot(str(path), "image/svg+xml", data)


def check_replaceable(out: Path) -> None:
    """--out may be new, or a page this command wrote (it carries MARKER); nothing else."""
    if out.is_symlink():
        raise ReportError(f"--out {out} is a symbolic link; not replacing it")
    if not out.exists():
        return
    if not out.is_file():
        raise ReportError(f"--out {out} exists and is not a regular file")
    try:
        with out.open("rb") as fh:
            head = fh.read(MARKER_WITHIN)
    except OSError as exc:
        raise ReportError(f"--out {out}: {exc.strerror or exc}") from None
    if MARKER.encode() not in head:
        raise ReportError(
            f"--out {out} exists and was not written by gates report; not replacing it"
        )


def gather(
    contracts: Sequence[Contract],
    out: Path,
    *,
    root: Path | None = None,
    audit: Path | None = None,
    plots: Sequence[Path] = (),
) -> ReportInputs:
    """Everything the page at ``out`` shows for these (validated) contracts, each input
    checked: ``root`` (default: the first contract's project root, else the current
    directory) anchors evidence paths; without ``audit``, DEFAULT_AUDIT under the root is
    read when it exists. Raises ReportError, also when ``out`` may not be replaced."""
    root = root or (find_root(contracts[0].path) if contracts else Path.cwd())
    base_dir = out.absolute().parent
    check_replaceable(out)
    audit_path, defaulted = audit, False
    if audit_path is None and (root / DEFAULT_AUDIT).exists():
        audit_path, defaulted = root / DEFAULT_AUDIT, True
    loaded = load_audit(audit_path, root, base_dir, defaulted=defaulted) if audit_path else None
    return ReportInputs(
        contracts=list(contracts),
        evidence=load_evidence(contracts, root, base_dir),
        audit=loaded,
        audit_note=f"not audited: no --audit given and no {DEFAULT_AUDIT.as_posix()}",
        plots=[load_plot(p) for p in plots],
        contract_files={c.id: (href(c.path, base_dir), shown(c.path, root)) for c in contracts},
        stale=staleness(list(contracts), root),
    )
