"""gates.report.page.render and its inputs: the counts are pv status's, every text is escaped, the
bytes depend only on the inputs, and the audit, evidence and plots show what their files say."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from html import escape as html_escape
from pathlib import Path

import pytest

from gates.model.contract import Contract
from gates.pv.staleness import staleness
from gates.pv.validate import validate
from gates.report.inputs import ReportError, load_audit, load_evidence, load_plot
from gates.report.page import Audit, AuditEntry, Plot, ReportInputs, count, number, render
from tests.conftest import FIXTURE_PROJECT, ROOT
from tests.unit.gates.report_support import (
    INJECTION,
    PageParser,
    audit_record,
    copy_with_description,
    pv_status_counts,
    write_json,
    write_plots,
)

DEMO = [FIXTURE_PROJECT / "contracts" / "valid" / "demo-v1.yaml"]
REAL = sorted((ROOT / "contracts").glob("*.yaml"))
PROJECTS = {"fixture": (DEMO, FIXTURE_PROJECT), "repository": (REAL, ROOT)}


@pytest.fixture(scope="module")
def real() -> list[Contract]:
    return validate(REAL, root=ROOT).contracts


def _contracts(files: list[Path], root: Path) -> list[Contract]:
    result = validate(files, root=root)
    assert not result.report.errors and not result.unreadable
    return result.contracts


@pytest.mark.parametrize("project", sorted(PROJECTS))
def test_the_header_counts_are_pv_status_counts(project):
    files, root = PROJECTS[project]
    contracts = _contracts(files, root)
    page = PageParser(render(ReportInputs(contracts, stale=staleness(contracts, root))))
    expected = pv_status_counts(files, root)
    assert page.counts == expected
    c = count(contracts)
    assert (c.gates, c.ship_blocking_met, c.ship_blocking_total) == (
        int(expected["gates"]),
        int(expected["ship-blocking-met"]),
        int(expected["ship-blocking-total"]),
    )


def test_a_gate_that_is_not_pass_is_outstanding_and_the_page_is_not_ship_ready(real):
    c = real[0]
    g = next(g for g in c.gates if g.ship_blocking)
    failed = replace(g, status="FAIL")
    demoted = replace(c, gates=tuple(failed if x is g else x for x in c.gates))
    page = PageParser(render(ReportInputs([demoted, *real[1:]])))
    assert page.counts["ship-ready"] == "no"
    assert page.counts["FAIL"] == "1"
    assert int(page.counts["ship-blocking-met"]) == int(page.counts["ship-blocking-total"]) - 1
    assert page.attrs_of("li", "data-outstanding") == [g.id]


def test_a_ship_blocking_pass_on_stale_evidence_keeps_the_page_from_ship_ready(real):
    """As `pv status --require-ship-ready`: PASS on stale evidence is counted PASS, shown
    stale with its reason, and a ship-blocking one is listed and not ship-ready; a stale
    gate that is not ship-blocking is shown and counted, and blocks nothing."""
    gates = [g for c in real for g in c.gates if g.status == "PASS"]
    blocking = next(g for g in gates if g.ship_blocking)
    other = next(g for g in gates if not g.ship_blocking)
    fresh = PageParser(render(ReportInputs(real)))
    assert fresh.counts["ship-ready"] == "yes" and fresh.counts["stale"] == "0"

    not_blocking = {other.id: "b.py changed since commit 0123"}
    both = {blocking.id: "a.py <changed> since commit 4567", **not_blocking}
    for stale, ready in ((not_blocking, "yes"), (both, "no")):
        html = render(ReportInputs(real, stale=stale))
        page = PageParser(html)
        assert page.counts["ship-ready"] == ready
        assert page.counts["stale"] == str(len(stale))
        assert page.counts["PASS"] == fresh.counts["PASS"]  # still PASS, flagged
        assert page.counts["ship-blocking-met"] == fresh.counts["ship-blocking-met"]
        listed = page.attrs_of("li", "data-stale")
        assert listed == ([blocking.id] if blocking.id in stale else [])
        assert html.count("data-stale-badge") == len(stale)
        # each reason escaped on its gate's card; a ship-blocking one in the header's list too
        expected = {why: 2 if gid == blocking.id else 1 for gid, why in stale.items()}
        assert {why: html.count(html_escape(why)) for why in stale.values()} == expected
        assert count(real, stale).ship_ready is (ready == "yes")


def test_markup_from_a_contract_is_escaped(tmp_path):
    files = copy_with_description(REAL, tmp_path / "contracts", INJECTION)
    contracts = _contracts(files, ROOT)
    record = audit_record(contracts, stale_node=f"tests/x.py::t{INJECTION}")
    audit = load_audit(write_json(tmp_path / "a.json", record), tmp_path, tmp_path, defaulted=False)
    page = render(ReportInputs(contracts, audit=audit))
    parsed = PageParser(page)
    assert [t for t, _ in parsed.tags if t in ("script", "img")] == []
    assert "&lt;script&gt;window.__shipgate_injected = true; alert(1)&lt;/script&gt;" in page
    assert "onerror=&quot;window" in page
    assert page.count("&lt;script&gt;") == 2, "the description and the audit's node"


def test_the_same_inputs_give_the_same_bytes(real, tmp_path):
    svg, png = write_plots(tmp_path)
    evidence = load_evidence(real, ROOT, tmp_path)
    plots = [load_plot(svg), load_plot(png)]
    first = render(ReportInputs(real, evidence=evidence, plots=plots))
    again = render(
        ReportInputs(
            validate(REAL, root=ROOT).contracts,
            evidence=load_evidence(real, ROOT, tmp_path),
            plots=[load_plot(svg), load_plot(png)],
        )
    )
    assert first.encode() == again.encode()


def test_measured_values_thresholds_and_evidence_are_shown(tmp_path):
    contracts = _contracts(DEMO, FIXTURE_PROJECT)
    evidence = load_evidence(contracts, FIXTURE_PROJECT, tmp_path / "site")
    page = render(ReportInputs(contracts, evidence=evidence))
    ev = evidence["GATE-DEMO-001"]
    assert (tmp_path / "site" / ev.href).resolve() == (
        FIXTURE_PROJECT / "evidence/C-DEMO/GATE-DEMO-001.json"
    )
    assert ev.shown_path == "evidence/C-DEMO/GATE-DEMO-001.json"
    assert "counterexamples == 0 examples" in page
    assert 'data-measured="0">counterexamples = <strong>0</strong> examples' in page
    assert "meets the threshold" in page
    assert "2026-02-01T12:00:00Z" in page and "c03266c58106" in page
    assert 'data-measured="">no evidence</dd>' in page, "GATE-DEMO-002 is PENDING"


def test_a_measurement_that_misses_its_threshold_says_so(tmp_path):
    contracts = _contracts(DEMO, FIXTURE_PROJECT)
    ev = load_evidence(contracts, FIXTURE_PROJECT, tmp_path)["GATE-DEMO-001"]
    data = json.loads(json.dumps(ev.data))
    data["measurements"]["counterexamples"]["value"] = 3
    page = render(ReportInputs(contracts, evidence={"GATE-DEMO-001": type(ev)(ev.href, "x", data)}))
    assert "counterexamples = <strong>3</strong> examples" in page
    assert "misses the threshold" in page and "meets the threshold" not in page


def test_each_mutant_shows_its_audit_verdict(real):
    record = audit_record(real, stale_node="tests/elsewhere.py::test_old")
    rows = record["rows"]
    audit = Audit(
        "runs/audit/audit.json",
        "../runs/audit/audit.json",
        True,
        "2026-11-23T12:00:00Z",
        "0" * 40,
        False,
        3,
        2,
        False,
        {
            (r["contract"], r["test"], r["mutant"]): AuditEntry(
                r["node"], r["outcome"], r["verdict"]
            )
            for r in rows
        },
    )
    page = render(ReportInputs(real, audit=audit))
    parsed = PageParser(page)
    verdicts = parsed.attrs_of("span", "data-audit")
    mutants = sum(len(t.mutants) for c in real for t in c.falsification_tests)
    assert verdicts.count("killed") == 1 and verdicts.count("SURVIVED") == 1
    assert verdicts.count("passes") == 1
    assert (
        verdicts.count("not audited")
        == sum(
            1 + len(t.mutants) if t.bound and t.test else len(t.mutants)
            for c in real
            for t in c.falsification_tests
        )
        - 3
    ), "the stale row is not audited: it ran another node"
    assert "the audit ran tests/elsewhere.py::test_old, not the test bound now" in page
    assert "found at its default location" in page
    assert f'<span data-audit-count="not audited">{mutants - 2}</span>' in page


def test_without_an_audit_every_mutant_is_not_audited(real):
    page = render(ReportInputs(real, audit_note="not audited: no audit file here"))
    verdicts = set(PageParser(page).attrs_of("span", "data-audit"))
    assert verdicts == {"not audited"}
    assert "not audited: no audit file here" in page


def test_plots_are_embedded_as_data_uris(tmp_path):
    svg, png = write_plots(tmp_path)
    page = render(ReportInputs([], plots=[load_plot(svg), load_plot(png)]))
    sources = PageParser(page).attrs_of("img", "src")
    assert len(sources) == 2
    for src, path, mime in zip(sources, (svg, png), ("image/svg+xml", "image/png"), strict=True):
        head, data = str(src).split(",", 1)
        assert head == f"data:{mime};base64"
        assert base64.b64decode(data) == path.read_bytes()


@pytest.mark.parametrize(
    ("name", "data", "why"),
    [
        ("gone.svg", None, "No such file"),
        ("bad.svg", b"<svg xmlns='http://www.w3.org/2000/svg'><g></svg>", "not well-formed XML"),
        ("html.svg", b"<html><body/></html>", "not an SVG"),
        ("bad.png", b"GIF89a....", "not a PNG image"),
        ("plot.jpg", b"\xff\xd8\xff", "not .svg or .png"),
    ],
)
def test_a_bad_plot_is_refused_naming_it(tmp_path, name, data, why):
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(ReportError, match=why) as info:
        load_plot(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (373509120, "373509120"), (1e-05, "1e-05"), (3.1e-06, "3.1e-06"), (1.5, "1.5")],
)
def test_numbers_are_shown_as_written(value, shown):
    assert number(value) == shown


def test_a_plot_name_is_escaped():
    page = render(ReportInputs([], plots=[Plot("<b>x</b>.svg", "image/svg+xml", b"<svg/>")]))
    assert "<b>" not in page and "&lt;b&gt;x&lt;/b&gt;.svg" in page
