"""Run an example's gates against several releases of a library, one scratch virtualenv
each, and write what each gate said: release x gate -> verdict and measured values.

    python tools/version_matrix.py --example examples/hf-trainer \\
        --package transformers --versions 4.45.2 4.46.3 5.24.0 --with accelerate \\
        --causes examples/hf-trainer/version-causes.json \\
        --out examples/hf-trainer/evidence/version-matrix.json

Each release gets ``<venvs>/<package>-<version>`` (default under the project's ignored
cache, .cache/shipgate/version-matrix/), made once and reused: torch at the version this
interpreter runs (pip takes the CPU wheel on disk), the release asked for, what ``--with``
names (the example's other needs: accelerate for Trainer), whatever else pip resolves for
them (numpy, ...), pytest and hypothesis, and this repository
installed editable, so the framework measured is the working tree's. In it, from the
example's directory, ``gates check GATE --out FILE`` runs each gate of the example's
contracts (its bound tests, then its measurement), unmodified.

A row is the verdict the evidence file says, or ``no verdict (exit N)`` with the last line
the check printed when it wrote none: a crash is reported, never hidden. Every FAIL and
every missing verdict is joined with its explanation from ``--causes`` (a JSON file,
``{"GATE@version": "what in that release's source explains it"}``, written by whoever read
that source); one with no entry says ``unexplained``, so a reader sees what nobody has
explained yet. The versions installed (the package, torch, numpy, accelerate) come from the
virtualenv itself, not from what was asked.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gates import mutants  # noqa: E402
from gates.io.files import atomic_write_text  # noqa: E402
from gates.provenance.evidence import host_info  # noqa: E402
from gates.service import usable_contracts  # noqa: E402

DEFAULT_VENVS = ROOT / ".cache" / "shipgate" / "version-matrix"
#: What a gate check needs beside the package under test and this repository.
TOOLS = ("pytest", "hypothesis")
REPORTED = ("transformers", "accelerate", "torch", "numpy")
PIP_TIMEOUT_S = 1800
CHECK_TIMEOUT_S = 900
UNEXPLAINED = "unexplained"


def venv_python(venvs: Path, package: str, version: str) -> Path:
    return venvs / f"{package}-{version}" / "bin" / "python"


def ensure_venv(
    venvs: Path, package: str, version: str, torch_version: str, extra: tuple[str, ...] = ()
) -> Path:
    """The release's virtualenv, made and filled once for this set of requirements (filled
    again when they change); its python."""
    python = venv_python(venvs, package, version)
    wanted = [f"{package}=={version}", f"torch=={torch_version}", *TOOLS, *extra]
    done = python.parent.parent / ".filled"
    if done.is_file() and done.read_text(encoding="utf-8").split() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # torch first and pinned: a package that asks for plain torch then finds it installed.
    subprocess.run([*pip, f"torch=={torch_version}"], check=True, timeout=PIP_TIMEOUT_S)
    subprocess.run([*pip, *wanted], check=True, timeout=PIP_TIMEOUT_S)
    subprocess.run([*pip, "-e", str(ROOT)], check=True, timeout=PIP_TIMEOUT_S)
    done.write_text("\n".join(wanted) + "\n", encoding="utf-8")
    return python


def installed(python: Path) -> dict[str, str | None]:
    """The versions of REPORTED as the virtualenv has them (None: not installed)."""
    program = (
        "import importlib.metadata as m, json, sys\n"
        "def v(name):\n"
        "    try:\n"
        "        return m.version(name)\n"
        "    except m.PackageNotFoundError:\n"
        "        return None\n"
        "print(json.dumps({n: v(n) for n in sys.argv[1:]}))\n"
    )
    done = subprocess.run(
        [str(python), "-c", program, *REPORTED],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def gate_ids(example: Path) -> list[tuple[str, Path]]:
    """(gate id, contract path relative to the example) of every gate of its contracts, read
    as `gates check` reads them: validated together (gates.service), refused when invalid."""
    paths = sorted((example / "contracts").glob("*.yaml"))
    contracts = usable_contracts(paths, root=example, remeasuring=True).contracts
    return [(g.id, c.path.resolve().relative_to(example)) for c in contracts for g in c.gates]


def check_gate(python: Path, example: Path, gate: str, contract: Path, out: Path) -> dict:
    """One `gates check` of ``gate`` with the release's python: its verdict and values."""
    env = {k: v for k, v in os.environ.items() if k != mutants.ENV_VAR}
    env["HF_HUB_OFFLINE"] = "1"
    argv = [str(python), "-m", "gates.cli.gates", "check", gate, "--out", str(out)]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [*argv, "--files", str(contract)],
            cwd=example,
            env=env,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
        code, said = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        code, said = -1, f"timed out after {CHECK_TIMEOUT_S} s"
    seconds = round(time.perf_counter() - started, 1)
    return row_of(gate, code, said, out, seconds)


def row_of(gate: str, code: int, said: str, out: Path, seconds: float) -> dict:
    """A matrix row from what one check left: its evidence file, else its exit and last line."""
    if out.is_file():
        evidence = json.loads(out.read_text(encoding="utf-8"))
        measured = evidence.get("measurements", {})
        values = {name: m.get("value") for name, m in measured.items()}
        return {"gate": gate, "verdict": evidence["verdict"], "values": values, "seconds": seconds}
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    return {
        "gate": gate,
        "verdict": f"no verdict (exit {code})",
        "said": lines[-1] if lines else "",
        "seconds": seconds,
    }


def explain(rows: list[dict], causes: dict[str, str]) -> list[dict]:
    """Every row that is not a PASS, with its cause from ``causes`` (``GATE@version``)."""
    for row in rows:
        row.pop("cause", None)
        if row["verdict"] != "PASS":
            row["cause"] = causes.get(f"{row['gate']}@{row['version']}", UNEXPLAINED)
    return rows


def markdown(rows: list[dict], versions: list[str], gates: list[str]) -> str:
    """The matrix as a table: a line per release, a column per gate."""
    by = {(r["version"], r["gate"]): r["verdict"] for r in rows}
    lines = ["| release | " + " | ".join(gates) + " |", "|---" * (len(gates) + 1) + "|"]
    lines += [f"| {v} | " + " | ".join(by.get((v, g), "-") for g in gates) + " |" for v in versions]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--example", type=Path, required=True)
    p.add_argument("--package", default="transformers")
    p.add_argument("--versions", nargs="+", required=True)
    p.add_argument(
        "--with",
        dest="extra",
        nargs="*",
        default=[],
        help="other requirements the example needs beside the package (e.g. accelerate)",
    )
    p.add_argument("--causes", type=Path, help="JSON: {'GATE@version': 'why'}")
    p.add_argument(
        "--explain-only",
        action="store_true",
        help="measure nothing: join --causes into the record at --out again (after reading "
        "the source behind its FAILs)",
    )
    p.add_argument("--venvs", type=Path, default=DEFAULT_VENVS)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    example = args.example.resolve()
    causes = json.loads(args.causes.read_text(encoding="utf-8")) if args.causes else {}
    if args.explain_only:
        record = json.loads(args.out.read_text(encoding="utf-8"))
        record["rows"] = explain(record["rows"], causes)
        atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
        return 0
    gates = gate_ids(example)
    rows: list[dict] = []
    environments: dict[str, dict] = {}
    scratch = args.venvs / "out"
    scratch.mkdir(parents=True, exist_ok=True)
    # Every release is measured beside the torch this interpreter has (its CPU wheel).
    torch_version = importlib.metadata.version("torch").split("+")[0]
    for version in args.versions:
        python = ensure_venv(args.venvs, args.package, version, torch_version, tuple(args.extra))
        environments[version] = installed(python)
        for gate, contract in gates:
            out = scratch / f"{gate}@{version}.json"
            out.unlink(missing_ok=True)
            row = {"version": version, **check_gate(python, example, gate, contract, out)}
            print(f"{args.package} {version} {gate}: {row['verdict']}", flush=True)
            rows.append(row)
    record = {
        "kind": "version-matrix",
        "example": str(example.relative_to(ROOT) if example.is_relative_to(ROOT) else example),
        "package": args.package,
        "captured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": ["python", "tools/version_matrix.py", *(argv or sys.argv[1:])],
        "host": host_info(),
        "environments": environments,
        "rows": explain(rows, causes),
        "table": markdown(rows, args.versions, [g for g, _ in gates]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
    print(record["table"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
