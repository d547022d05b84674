"""Helpers for the `gates report` tests: the counts `pv status --format json` reports, a small
audit file built from real contracts, a real `trainer plot` figure, a contract whose text
carries markup, and a copy of the fixture project whose evidence a test can make stale."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

from ruamel.yaml import YAML

from gates.cli import pv
from gates.model.contract import SHIP_STATUSES, Contract
from tests.conftest import FIXTURE_PROJECT

#: Markup a contract may carry; the page must show it as text and never run it.
INJECTION = (
    "<script>window.__shipgate_injected = true; alert(1)</script>"
    '<img src="x" onerror="window.__shipgate_injected = true">'
)


def copy_demo_project(root: Path) -> Path:
    """A copy at ``root`` of the fixture project's valid contract (demo-v1.yaml), its
    evidence, tests and pyproject: fresh evidence, until a test edits what it records."""
    shutil.copytree(FIXTURE_PROJECT / "tests", root / "tests")
    shutil.copytree(FIXTURE_PROJECT / "evidence" / "C-DEMO", root / "evidence" / "C-DEMO")
    (root / "contracts").mkdir()
    shutil.copy(FIXTURE_PROJECT / "contracts/valid/demo-v1.yaml", root / "contracts")
    shutil.copy(FIXTURE_PROJECT / "pyproject.toml", root)
    return root


def _run(main, argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    return rc, out.getvalue()


def pv_status_counts(files: list[Path], root: Path) -> dict[str, str]:
    """The header numbers from `pv status --format json`, run in this process."""
    rc, out = _run(pv.main, ["status", "--format", "json", "--root", str(root), *map(str, files)])
    assert rc == 0, out
    return counts_from_status(json.loads(out))


def counts_from_status(status: dict) -> dict[str, str]:
    """The header numbers, summed from what `pv status --format json` prints, independently
    of gates.report.page.count. Ship-ready: no ship-blocking gate outstanding or on stale
    evidence, which is what `pv status --require-ship-ready` exits 0 on."""
    gates = [g for c in status["contracts"] for g in c["gates"]]
    blocking = sum(g["ship_blocking"] for g in gates)
    outstanding = status["ship_blocking_outstanding"]
    counts = {"gates": str(len(gates))}
    counts |= {s: str(sum(c["counts"][s] for c in status["contracts"])) for s in SHIP_STATUSES}
    counts["ship-blocking-total"] = str(blocking)
    counts["ship-blocking-met"] = str(blocking - len(outstanding))
    counts["stale"] = str(sum(c["counts"]["STALE"] for c in status["contracts"]))
    counts["ship-ready"] = "no" if outstanding or status["ship_blocking_stale"] else "yes"
    return counts


def audit_record(contracts: list[Contract], *, stale_node: str | None = None) -> dict:
    """A schema-valid `gates audit` record for the first bound test with two mutants: the real
    code passes, the first mutant is killed, the second SURVIVED. ``stale_node``: one more row
    for the next bound test, run on another node than the contract binds now."""
    bound = [(c, t) for c in contracts for t in c.falsification_tests if t.bound and t.test]
    c, t = next((c, t) for c, t in bound if len(t.mutants) >= 2)
    rows = [
        (c.id, t.id, t.test, None, "passed", "passes"),
        (c.id, t.id, t.test, t.mutants[0].id, "failed", "killed"),
        (c.id, t.id, t.test, t.mutants[1].id, "passed", "SURVIVED"),
    ]
    if stale_node is not None:
        c2, t2 = next((c2, t2) for c2, t2 in bound if t2 is not t and t2.mutants)
        rows.append((c2.id, t2.id, stale_node, t2.mutants[0].id, "failed", "killed"))
    return {
        "kind": "mutation-audit",
        "captured_at": "2026-11-23T12:00:00Z",
        "host": {"cpu": "fixture"},
        "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        "command": ["gates", "audit", "--out", "runs/audit/audit.json"],
        "rows": [
            {
                "contract": cid,
                "test": tid,
                "node": node,
                "mutant": mutant,
                "outcome": outcome,
                "verdict": verdict,
                "seconds": 1.5,
            }
            for cid, tid, node, mutant, outcome, verdict in rows
        ],
        "mutants": sum(r[3] is not None for r in rows),
        "killed": sum(r[5] == "killed" for r in rows),
        "ok": False,
    }


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def write_plots(directory: Path) -> tuple[Path, Path]:
    """A real `trainer plot` figure of a small synthetic run, as SVG and PNG."""
    from trainer.plot import figure  # noqa: PLC0415 - matplotlib only where a plot is drawn
    from trainer.plot.runs import RunSeries  # noqa: PLC0415

    steps = list(range(1, 21))
    run = RunSeries(
        path=directory,
        steps=steps,
        loss=[4.0 / s**0.5 for s in steps],
        lr=[1e-3 * min(1.0, s / 5) for s in steps],
        grad_norm=[1.0 / s for s in steps],
        val_steps=[10, 20],
        val_loss=[1.4, 1.0],
    )
    fig = figure.draw([run], ["synthetic"])
    directory.mkdir(parents=True, exist_ok=True)
    svg, png = directory / "loss.svg", directory / "loss.png"
    svg.write_bytes(figure.to_bytes(fig, "svg"))
    png.write_bytes(figure.to_bytes(fig, "png"))
    return svg, png


def copy_with_description(files: list[Path], directory: Path, description: str) -> list[Path]:
    """``files`` copied into ``directory``, the first one's metadata.description replaced."""
    directory.mkdir(parents=True, exist_ok=True)
    copies = [Path(shutil.copy(f, directory / f.name)) for f in files]
    yaml = YAML()
    data = yaml.load(copies[0].read_text(encoding="utf-8"))
    data["metadata"]["description"] = description
    with copies[0].open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    return copies


class PageParser(HTMLParser):
    """A rendered page read back: every start tag, and the text of each [data-count]."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.counts: dict[str, str] = {}
        self._count: str | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        key = dict(attrs).get("data-count")
        if key is not None:
            self._count = key
            self.counts[key] = ""

    def handle_endtag(self, tag: str) -> None:
        self._count = None

    def handle_data(self, data: str) -> None:
        if self._count is not None:
            self.counts[self._count] += data

    def attrs_of(self, tag: str, attr: str) -> list[str | None]:
        return [a[attr] for t, a in self.tags if t == tag and attr in a]
