"""The gates report: contracts, their evidence and the mutation audit as one static HTML page.

    inputs = ReportInputs(contracts, evidence={...}, audit=None, audit_note="...", plots=[])
    page = render(inputs)            # str; the same inputs give the same bytes, every time

Pure: nothing here reads a file or the clock. `gates.report.inputs` loads and checks what a
page shows (evidence, audit, plots); `gates report` (gates/cli/gates_report.py) writes it.

The page is self-contained: inline CSS (allowed by its sha256 in the page's Content-Security-
Policy), plots as data: URIs, no script, no fonts, nothing fetched. Every text that comes from
a contract, evidence or audit file is HTML-escaped; the CSP (no script at all) is a second
wall, not the first. The header's counts are computed as `pv status` computes them, stale
evidence included: a PASS whose evidence no longer matches its sources (or whose tests' audit
rows do not hold) is shown stale on its card and, when ship-blocking, keeps the page from
reading ship-ready.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gates.model.contract import SHIP_STATUSES, Contract, FalsificationTest, Gate, Threshold

#: Written into every page; an existing --out file without it is not ours to replace.
GENERATOR = "shipgate gates report"
MARKER = f'<meta name="generator" content="{GENERATOR}">'
NOT_AUDITED = "not audited"


@dataclass(frozen=True)
class Counts:
    """The numbers `pv status` reports, over every gate of the contracts given."""

    gates: int
    by_status: Mapping[str, int]
    ship_blocking_total: int
    ship_blocking_met: int
    outstanding: tuple[tuple[str, str, str], ...]  # (gate id, status, contract id)
    stale: int = 0  # gates on stale evidence, ship-blocking or not
    stale_blocking: tuple[tuple[str, str, str], ...] = ()  # (gate id, contract id, why)

    @property
    def ship_ready(self) -> bool:
        """`pv status --require-ship-ready`'s verdict: every ship-blocking gate PASS, on
        fresh evidence."""
        return not self.outstanding and not self.stale_blocking


def count(contracts: Sequence[Contract], stale: Mapping[str, str] | None = None) -> Counts:
    """The counts of ``contracts``; ``stale``: gate id -> why its evidence is stale
    (gates.pv.staleness), fresh gates absent."""
    stale = stale or {}
    gates = [(c, g) for c in contracts for g in c.gates]
    blocking = [(c, g) for c, g in gates if g.ship_blocking]
    return Counts(
        gates=len(gates),
        by_status={s: sum(g.status == s for _, g in gates) for s in SHIP_STATUSES},
        ship_blocking_total=len(blocking),
        ship_blocking_met=sum(g.status == "PASS" for _, g in blocking),
        outstanding=tuple((g.id, g.status, c.id) for c, g in blocking if g.status != "PASS"),
        stale=sum(g.id in stale for _, g in gates),
        stale_blocking=tuple((g.id, c.id, stale[g.id]) for c, g in blocking if g.id in stale),
    )


@dataclass(frozen=True)
class GateEvidence:
    """A gate's evidence file, schema-checked, and the page's relative link to it."""

    href: str
    shown_path: str
    data: Mapping[str, Any]


@dataclass(frozen=True)
class AuditEntry:
    node: str
    outcome: str
    verdict: str  # passes / REAL CODE FAILED / killed / SURVIVED / ERROR


@dataclass(frozen=True)
class Audit:
    """A `gates audit --out` file: its provenance and a verdict per (contract, test, mutant);
    mutant None is the run on the real code."""

    shown_path: str
    href: str
    defaulted: bool  # found at evidence/audit/audit.json, not given with --audit
    captured_at: str
    commit: str
    dirty: bool
    mutants: int
    killed: int
    ok: bool
    entries: Mapping[tuple[str, str, str | None], AuditEntry]


@dataclass(frozen=True)
class Plot:
    name: str
    mime: str  # image/svg+xml | image/png
    data: bytes

    @property
    def uri(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


@dataclass(frozen=True)
class ReportInputs:
    contracts: Sequence[Contract]
    evidence: Mapping[str, GateEvidence] = field(default_factory=dict)  # by gate id
    audit: Audit | None = None
    audit_note: str = "not audited: no audit file"  # shown when audit is None
    plots: Sequence[Plot] = ()
    #: contract id -> (relative link, path shown); the contract's path as given otherwise
    contract_files: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: gate id -> why its evidence is stale (gates.pv.staleness); fresh: absent
    stale: Mapping[str, str] = field(default_factory=dict)


def e(text: object) -> str:
    """HTML-escape any text for element content and quoted attribute values."""
    return html.escape(str(text), quote=True)


def number(value: float) -> str:
    """373509120 as written, not 3.73509e+08; other floats by repr (shortest round-trip)."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _status(status: str) -> str:
    return (
        f'<span class="status s-{e(status.lower())}" data-status="{e(status)}">{e(status)}</span>'
    )


def _verdict(text: str) -> str:
    kind = {
        "killed": "ok",
        "passes": "ok",
        "SURVIVED": "bad",
        "ERROR": "bad",
        "CRASHED": "bad",
        "TIMEOUT": "bad",
        "SEAM-BROKEN": "bad",
        NOT_AUDITED: "none",
    }.get(text, "bad" if text.startswith("REAL CODE") else "none")
    return f'<span class="audit a-{kind}" data-audit="{e(text)}">{e(text)}</span>'


def _header(inputs: ReportInputs, counts: Counts) -> str:
    cells = [("gates", "gates", counts.gates)]
    cells += [(s, s, counts.by_status[s]) for s in SHIP_STATUSES]
    rows = "".join(
        f'<div class="count"><dt>{e(label)}</dt><dd data-count="{e(key)}">{value}</dd></div>'
        for label, key, value in cells
    )
    ready = "yes" if counts.ship_ready else "no"
    rows += (
        '<div class="count"><dt>ship-blocking PASS</dt><dd>'
        f'<span data-count="ship-blocking-met">{counts.ship_blocking_met}</span> of '
        f'<span data-count="ship-blocking-total">{counts.ship_blocking_total}</span></dd></div>'
        f'<div class="count"><dt>on stale evidence</dt>'
        f'<dd data-count="stale">{counts.stale}</dd></div>'
        f'<div class="count ready-{ready}"><dt>ship-ready</dt>'
        f'<dd data-count="ship-ready">{ready}</dd></div>'
    )
    outstanding = "".join(
        f'<li data-outstanding="{e(gid)}"><a href="#{e(gid)}">{e(gid)}</a> '
        f"({e(status)}) in {e(cid)}</li>"
        for gid, status, cid in counts.outstanding
    )
    stale = "".join(
        f'<li data-stale="{e(gid)}"><a href="#{e(gid)}">{e(gid)}</a> in {e(cid)}: {e(why)}</li>'
        for gid, cid, why in counts.stale_blocking
    )
    toc = "".join(
        f'<li><a href="#{e(c.id)}">{e(c.id)}</a> {e(c.metadata.version)} '
        f"({len(c.gates)} gates)</li>"
        for c in inputs.contracts
    )
    return (
        f"<header><h1>shipgate gates report</h1>"
        f'<p class="lede">{len(inputs.contracts)} contracts, counted as <code>pv status</code> '
        f"counts them.</p>"
        f'<dl class="counts" id="counts">{rows}</dl>'
        + (
            f'<p>Ship-blocking gates not PASS:</p><ul class="outstanding">{outstanding}</ul>'
            if outstanding
            else ""
        )
        + (
            "<p>Ship-blocking gates PASS on stale evidence (not ship-ready until measured "
            f'again):</p><ul class="stale">{stale}</ul>'
            if stale
            else ""
        )
        + f'<nav><ul class="toc">{toc}</ul></nav></header>'
    )


def _audit_counts(inputs: ReportInputs) -> str:
    """How the mutants on this page fared: killed, SURVIVED, ERROR, CRASHED, TIMEOUT,
    SEAM-BROKEN, not audited."""
    tally: dict[str, int] = {}
    for c in inputs.contracts:
        for t in c.falsification_tests:
            for m in t.mutants:
                verdict = _mutant_verdict(inputs.audit, c, t, m.id)[0]
                tally[verdict] = tally.get(verdict, 0) + 1
    return ", ".join(
        f'<span data-audit-count="{e(v)}">{tally[v]}</span> {e(v)}'
        for v in ("killed", "SURVIVED", "ERROR", "CRASHED", "TIMEOUT", "SEAM-BROKEN", NOT_AUDITED)
        if v in tally
    )


def _audit_summary(inputs: ReportInputs) -> str:
    a = inputs.audit
    mutants = f"<p>Mutants on this page: {_audit_counts(inputs) or 'none'}.</p>"
    if a is None:
        return (
            f'<section id="audit" data-audited="no"><h2>Mutation audit</h2>'
            f"<p>{e(inputs.audit_note)}</p>{mutants}</section>"
        )
    how = "found at its default location" if a.defaulted else "given with --audit"
    return (
        f'<section id="audit" data-audited="yes"><h2>Mutation audit</h2>'
        f'<p>From <a href="{e(a.href)}" data-audit-file>{e(a.shown_path)}</a> ({how}), '
        f"captured {e(a.captured_at)} at commit {e(a.commit[:12])}"
        f"{' (dirty)' if a.dirty else ''}: {a.killed} of {a.mutants} mutants killed; "
        f"audit {'ok' if a.ok else 'NOT ok'}.</p>{mutants}</section>"
    )


def _plots(plots: Sequence[Plot]) -> str:
    if not plots:
        return ""
    figures = "".join(
        f'<figure><img src="{p.uri}" alt="plot {e(p.name)}" data-plot="{e(p.name)}">'
        f"<figcaption>{e(p.name)}</figcaption></figure>"
        for p in plots
    )
    return f'<section id="plots"><h2>Plots</h2>{figures}</section>'


def _mutant_verdict(
    audit: Audit | None, c: Contract, t: FalsificationTest, mutant: str | None
) -> tuple[str, str]:
    """(verdict, note) of one audited run; the note says why a row was not taken."""
    if audit is None or not t.bound:
        return NOT_AUDITED, ""
    entry = audit.entries.get((c.id, t.id, mutant))
    if entry is None:
        return NOT_AUDITED, ""
    if entry.node != t.test:
        return NOT_AUDITED, f"the audit ran {entry.node}, not the test bound now"
    return entry.verdict, ""


def _test(audit: Audit | None, c: Contract, t: FalsificationTest) -> str:
    node = f"<code>{e(t.test)}</code>" if t.test else "<em>no test bound</em>"
    items = []
    runs: list[tuple[str | None, str]] = [(None, "real code")] if t.bound and t.test else []
    runs += [(m.id, m.description) for m in t.mutants]
    for mutant, description in runs:
        verdict, note = _mutant_verdict(audit, c, t, mutant)
        label = (
            '<span class="real">(real code)</span>'
            if mutant is None
            else f"<code>{e(mutant)}</code> {e(description)}"
        )
        items.append(
            f'<li data-mutant="{e(mutant or "")}">{_verdict(verdict)} {label}'
            + (f' <span class="note">{e(note)}</span>' if note else "")
            + "</li>"
        )
    mutants = f'<ul class="mutants">{"".join(items)}</ul>' if items else ""
    return (
        f'<section class="test" id="{e(t.id)}" data-test-id="{e(t.id)}">'
        f'<h4>{e(t.id)} <span class="badge">{e(t.status)}</span></h4>'
        f'<dl class="kv"><dt>test</dt><dd>{node}</dd>'
        f"<dt>rule</dt><dd>{e(t.rule)}</dd><dt>prediction</dt><dd>{e(t.prediction)}</dd>"
        f"<dt>if it fails</dt><dd>{e(t.if_fails)}</dd></dl>{mutants}</section>"
    )


def _measured(g: Gate, ev: GateEvidence | None) -> str:
    if ev is None:
        return '<dd data-measured="">no evidence</dd>'
    return "".join(_measured_one(t, ev.data["measurements"].get(t.metric)) for t in g.thresholds)


def _measured_one(t: Threshold, m: dict | None) -> str:
    if m is None:
        return f'<dd data-measured="">no measurement of {e(t.metric)} in the evidence</dd>'
    value = number(m["value"])
    held = m["unit"] == t.unit and t.holds(float(m["value"]))
    return (
        f'<dd data-measured="{e(value)}">{e(t.metric)} = <strong>{e(value)}</strong> '
        f'{e(m["unit"])} <span class="{"meets" if held else "misses"}">'
        f"{'meets' if held else 'misses'} the threshold</span></dd>"
    )


def _evidence(ev: GateEvidence) -> str:
    d = ev.data
    commit = d["git"]["commit"][:12] + (" (dirty)" if d["git"]["dirty"] else "")
    other = [
        f"{e(k)} = {e(number(m['value']))} {e(m['unit'])}"
        for k, m in d["measurements"].items()
        if k not in {t["metric"] for t in d.get("thresholds", [d["threshold"]])}
    ]
    artifacts = "".join(
        f"<li><code>{e(a.get('path') or a.get('name', ''))}</code> "
        f'sha256 <code class="sha">{e(a["sha256"][:12])}</code>'
        f" ({a['bytes']} bytes)</li>"
        for a in d["artifacts"]
    )
    partial = d.get("partial")
    out = [
        f"<dt>verdict</dt><dd>{_status(d['verdict'])}</dd>",
        f"<dt>captured</dt><dd>{e(d['captured_at'])}</dd>",
        f"<dt>commit</dt><dd><code>{e(commit)}</code> "
        f"(contract {e(d['contract']['version'])})</dd>",
        f'<dt>evidence</dt><dd><a href="{e(ev.href)}" data-evidence="{e(d["gate"])}">'
        f"{e(ev.shown_path)}</a></dd>",
    ]
    if other:
        out.append(f"<dt>also measured</dt><dd>{'; '.join(other)}</dd>")
    out.append(
        f"<dt>artifacts</dt><dd>{f'<ul>{artifacts}</ul>' if artifacts else 'none recorded'}</dd>"
    )
    if partial:
        done = "".join(f"<li>{e(x)}</li>" for x in partial["discharged"])
        not_done = "".join(f"<li>{e(x)}</li>" for x in partial["not_discharged"])
        out.append(f"<dt>discharged</dt><dd><ul>{done}</ul></dd>")
        out.append(f"<dt>not discharged</dt><dd><ul>{not_done}</ul></dd>")
    return "".join(out)


def _gate(g: Gate, ev: GateEvidence | None, stale: str | None = None) -> str:
    blocking = "ship-blocking" if g.ship_blocking else "not ship-blocking"
    flag = ' <span class="status s-stale" data-stale-badge>STALE</span>' if stale else ""
    tests = ", ".join(f'<a href="#{e(t)}">{e(t)}</a>' for t in g.falsification_tests)
    parts = [
        f'<section class="gate" id="{e(g.id)}" data-gate-id="{e(g.id)}" '
        f'data-status="{e(g.status)}" data-ship-blocking="{"yes" if g.ship_blocking else "no"}">',
        f'<h4>{e(g.id)} {_status(g.status)}{flag} <span class="badge">{blocking}</span></h4>',
        f'<dl class="kv"><dt>rule</dt><dd>{e(g.rule)}</dd>',
        f"<dt>threshold</dt><dd data-threshold><code>{e(g.thresholds_text())}</code></dd>",
        f"<dt>measured</dt>{_measured(g, ev)}",
        f"<dt>tests</dt><dd>{tests}</dd>",
    ]
    if stale:
        parts.append(f'<dt>stale</dt><dd class="note" data-stale-why>{e(stale)}</dd>')
    if ev is not None:
        parts.append(_evidence(ev))
    elif g.evidence:
        parts.append(f"<dt>evidence</dt><dd>{e(g.evidence)} (not read)</dd>")
    if g.partial_note:
        parts.append(f"<dt>partial</dt><dd>{e(g.partial_note)}</dd>")
    if g.blocks_on:
        items = "".join(f"<li>{e(b)}</li>" for b in g.blocks_on)
        parts.append(f"<dt>blocks on</dt><dd><ul>{items}</ul></dd>")
    parts.append("</dl></section>")
    return "".join(parts)


def _contract(inputs: ReportInputs, c: Contract) -> str:
    md = c.metadata
    counts = "  ".join(f"{s} {sum(g.status == s for g in c.gates)}" for s in SHIP_STATUSES)
    invariants = "".join(
        f'<li id="{e(i.id)}" data-invariant-id="{e(i.id)}"><strong>{e(i.id)}</strong> '
        f"{e(i.statement)}"
        + (f" <code>{e(i.formula)}</code>" if i.formula else "")
        + " — falsified by "
        + ", ".join(f'<a href="#{e(t)}">{e(t)}</a>' for t in i.falsified_by)
        + "</li>"
        for i in c.invariants
    )
    gates = "".join(_gate(g, inputs.evidence.get(g.id), inputs.stale.get(g.id)) for g in c.gates)
    tests = "".join(_test(inputs.audit, c, t) for t in c.falsification_tests)
    depends = ", ".join(f'<a href="#{e(d)}">{e(d)}</a>' for d in md.depends_on)
    link, path = inputs.contract_files.get(c.id, (None, str(c.path)))
    file = f'<a href="{e(link)}"><code>{e(path)}</code></a>' if link else f"<code>{e(path)}</code>"
    return (
        f'<article class="contract" id="{e(c.id)}" data-contract-id="{e(c.id)}">'
        f'<h2>{e(c.id)} <span class="version">{e(md.version)}</span> '
        f'<span class="badge">{e(md.status)}</span></h2>'
        f'<p class="meta">{e(md.kind)} · {file} · created {e(md.created)}, '
        f"updated {e(md.updated)}" + (f" · depends on {depends}" if depends else "") + "</p>"
        f'<p class="description">{e(md.description)}</p>'
        f'<p class="contract-counts">{e(counts)}</p>'
        f"<h3>Gates</h3>{gates}"
        f'<h3>Invariants</h3><ul class="invariants">{invariants}</ul>'
        f"<h3>Falsification tests</h3>{tests}</article>"
    )


CSS = """
:root { color-scheme: light dark; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700;
  --none: #6e7781; --line: #d0d7de; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 72rem; padding: 1rem; }
code { font: 12px ui-monospace, monospace; overflow-wrap: anywhere; }
h1 { margin: 0 0 .25rem; } h2 { border-bottom: 2px solid var(--line); padding-bottom: .2rem; }
h4 { margin: .2rem 0; }
.counts { display: flex; flex-wrap: wrap; gap: .5rem; margin: .75rem 0; }
.count { border: 1px solid var(--line); border-radius: 6px; padding: .3rem .7rem; }
.count dt { font-size: 11px; text-transform: uppercase; color: var(--none); }
.count dd { margin: 0; font-size: 20px; font-weight: 600; }
.ready-yes dd { color: var(--ok); } .ready-no dd { color: var(--bad); }
.toc { columns: 2; }
.contract { margin: 2rem 0; }
.gate, .test { border: 1px solid var(--line); border-radius: 6px; padding: .5rem .8rem;
  margin: .5rem 0; }
.kv { display: grid; grid-template-columns: 9rem 1fr; gap: .15rem .8rem; margin: .3rem 0; }
.kv dt { color: var(--none); } .kv dd { margin: 0; } .kv ul { margin: 0; padding-left: 1.1rem; }
.status, .badge, .audit { font-size: 11px; font-weight: 600; border-radius: 4px;
  padding: .05rem .35rem; border: 1px solid currentColor; }
.s-pass, .a-ok, .meets { color: var(--ok); } .s-fail, .a-bad, .misses { color: var(--bad); }
.s-partial, .s-stale { color: var(--warn); } .s-pending, .a-none, .badge { color: var(--none); }
.mutants { list-style: none; padding-left: 0; } .mutants li { margin: .15rem 0; }
.note { color: var(--warn); }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto;
  border: 1px solid var(--line); background: #fff; }
"""


def render(inputs: ReportInputs) -> str:
    """The whole page. Deterministic: no clock, no environment; only ``inputs``."""
    counts = count(inputs.contracts, inputs.stale)
    css_hash = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode("ascii")
    csp = f"default-src 'none'; img-src data:; style-src 'sha256-{css_hash}'"
    ready = "yes" if counts.ship_ready else "no"
    body = (
        _header(inputs, counts)
        + "<main>"
        + _audit_summary(inputs)
        + _plots(inputs.plots)
        + "".join(_contract(inputs, c) for c in inputs.contracts)
        + "</main>"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f"{MARKER}\n"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>shipgate gates report: {counts.gates} gates, ship-ready {ready}</title>\n"
        f"<style>{CSS}</style>\n"
        f"</head><body>\n{body}\n</body></html>\n"
    )
