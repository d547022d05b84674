"""`gates report` opened in headless Chromium (Debian's, driven by playwright; no browser
download): this repository's page loads with no console or page error and fetches nothing,
its counts are `pv status`'s, every gate of `gates list` is on it, its plots load, its evidence
links reach the evidence files, the audit verdicts show, and markup in a contract is text.

Skips when Chromium or playwright is missing, unless $CI is set: CI must run it
(.ci/run installs Chromium with tools/install_chromium.sh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from gates.cli import gates as gates_cli
from gates.model.contract import Contract
from gates.pv.validate import validate
from tests.unit.gates.report_support import (
    INJECTION,
    audit_record,
    copy_with_description,
    counts_from_status,
    write_json,
    write_plots,
)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = sorted((ROOT / "contracts").glob("*.yaml"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Headless, as root, on a machine with no network: no sandbox, and nothing that phones home.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing() -> str | None:
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM} (tools/install_chromium.sh installs Debian's)"
    try:
        import playwright.sync_api  # noqa: F401, PLC0415
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


@dataclass
class Loaded:
    page: Any
    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Any]:
    """One Chromium for the module, with a fresh profile directory."""
    missing = _missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}; CI must run the browser test")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"),
            executable_path=CHROMIUM,
            args=CHROMIUM_FLAGS,
            headless=True,
        )
        try:
            yield context
        finally:
            context.close()


def open_page(browser, path: Path) -> Loaded:
    page = browser.new_page()
    loaded = Loaded(page)
    page.on("console", lambda m: loaded.console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda exc: loaded.errors.append(str(exc)))
    page.on("request", lambda r: loaded.requests.append(r.url))

    def dialog(d) -> None:
        loaded.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    page.goto(path.as_uri(), wait_until="load")
    return loaded


@pytest.fixture(scope="module")
def contracts() -> list[Contract]:
    return validate(CONTRACTS, root=ROOT).contracts


def report(out: Path, files: list[Path], *extra: str) -> None:
    argv = ["report", "--out", str(out), "--root", str(ROOT), *extra, "--files", *map(str, files)]
    assert gates_cli.main(argv) == 0


def cli(prog: str, *argv: str) -> subprocess.Popen:
    """`pv ...` / `gates ...` of this checkout in a process of its own (running beside us)."""
    return subprocess.Popen(
        [sys.executable, "-m", f"gates.cli.{prog}", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def output(process: subprocess.Popen) -> str:
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out
    return out


def test_the_repository_report_in_chromium(browser, contracts, tmp_path):
    files = [str(f) for f in CONTRACTS]
    status = cli("pv", "status", "--format", "json", "--root", str(ROOT), *files)
    listed = cli("gates", "list", "--root", str(ROOT), "--files", *files)
    svg, png = write_plots(tmp_path / "plots")
    audit = write_json(tmp_path / "audit.json", audit_record(contracts))
    out = tmp_path / "site" / "report.html"
    report(out, CONTRACTS, "--audit", str(audit), "--plot", str(svg), str(png))

    loaded = open_page(browser, out)
    page = loaded.page
    assert page.title().startswith("shipgate gates report")
    assert loaded.errors == [], "no page errors"
    assert loaded.console == [], "no console messages (errors, CSP violations, warnings)"
    assert loaded.dialogs == []
    assert [u for u in loaded.requests if not u.startswith(("file:", "data:"))] == []

    shown = page.eval_on_selector_all(
        "[data-count]", "els => els.map(e => [e.dataset.count, e.innerText.trim()])"
    )
    assert dict(shown) == counts_from_status(json.loads(output(status)))
    assert len(shown) == len(dict(shown)), "each count shown once"

    gate_ids = [line.split()[0] for line in output(listed).splitlines()]
    on_page = page.eval_on_selector_all("[data-gate-id]", "els => els.map(e => e.dataset.gateId)")
    assert on_page == gate_ids
    text = page.inner_text("body")
    assert all(gid in text for gid in gate_ids)

    plots = page.eval_on_selector_all(
        "img[data-plot]", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])"
    )
    assert len(plots) == 2
    assert all(done and w > 0 and h > 0 for done, w, h in plots), plots

    links = page.eval_on_selector_all("a[data-evidence]", "els => els.map(e => e.href)")
    assert len(links) == sum(1 for c in contracts for g in c.gates if g.evidence)
    for url in links:
        target = Path(unquote(urlparse(url).path))
        assert target.is_file() and target.is_relative_to(ROOT / "evidence"), url

    row = audit_record(contracts)["rows"]
    test = page.locator(f'[data-test-id="{row[0]["test"]}"]')
    verdicts = test.locator("[data-mutant]").evaluate_all(
        "els => els.map(e => [e.dataset.mutant, e.querySelector('[data-audit]').innerText])"
    )
    assert verdicts[:3] == [
        ["", "passes"],
        [row[1]["mutant"], "killed"],
        [row[2]["mutant"], "SURVIVED"],
    ]
    assert all(v == "not audited" for _, v in verdicts[3:])
    others = page.eval_on_selector_all(
        f'[data-test-id]:not([data-test-id="{row[0]["test"]}"]) [data-audit]',
        "els => els.map(e => e.innerText)",
    )
    assert others and set(others) == {"not audited"}
    page.close()


def test_markup_in_a_contract_is_shown_as_text_and_never_runs(browser, contracts, tmp_path):
    files = copy_with_description(CONTRACTS, tmp_path / "contracts", f"Injected: {INJECTION}")
    audit = audit_record(contracts, stale_node=f"tests/x.py::t{INJECTION}")
    out = tmp_path / "report.html"
    report(out, files, "--audit", str(write_json(tmp_path / "audit.json", audit)))

    loaded = open_page(browser, out)
    page = loaded.page
    assert page.evaluate("() => window.__shipgate_injected") is None, "the markup ran"
    assert loaded.dialogs == [] and loaded.errors == [] and loaded.console == []
    assert page.locator("script").count() == 0
    assert page.locator("img:not([data-plot])").count() == 0
    description = page.locator(f'[data-contract-id="{contracts[0].id}"] .description')
    assert description.inner_text() == f"Injected: {INJECTION}"
    assert f"the audit ran tests/x.py::t{INJECTION}" in page.inner_text("body")
    page.close()
