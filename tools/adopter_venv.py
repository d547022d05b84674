"""Adopters in virtualenvs of their own (issue 34): the framework installed with nothing of
the reference trainer, and each example with only what its own pyproject.toml declares.

    python tools/adopter_venv.py framework          # make framework-alone (CI runs it)
    python tools/adopter_venv.py examples/nanogpt   # make examples-alone runs every example

Everything is installed from a copy of the files git sees (the working tree, not HEAD, so
nothing is built inside the repository) into a fresh virtualenv under a temporary folder,
removed at the end. Needs the package registry.

``framework``: ``shipgate`` alone, with the dependencies it declares. torch, numpy,
matplotlib, safetensors and ``trainer`` must not be importable there. In a new git project:
``pv init`` -> ``pv validate`` -> ``gates check GATE-EXAMPLE-001`` -> ``gates audit``.

An example: torch first (``TORCH_SPEC`` and ``TORCH_PIP_ARGS``, as the Makefile takes them,
so pip takes the CPU wheel), then the example's ``[project] dependencies`` and its ``test``
extra, where the distributions of this repository (``shipgate``, ``shipgate-hf-trainer``)
come from the copy and every other one from the registry as pip resolves its range.
``trainer`` must not be importable (no example needs the reference trainer). Then, from the
example's own directory with that virtualenv's python: ``pv validate``, its pytest suite and
``gates check`` of every gate. Any step that fails stops the run with its exit status.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: This repository's distributions: name -> its directory, relative to the repository.
LOCAL = {
    "shipgate": ".",
    "shipgate-trainer": "trainer",
    "shipgate-hf-trainer": "examples/hf-trainer",
}
#: What the framework alone must not bring.
NOT_WITH_THE_FRAMEWORK = ("torch", "numpy", "matplotlib", "safetensors", "trainer")
GATE_ID = re.compile(r"^\s*-\s+id:\s+(GATE-[A-Z0-9-]+)\s*$", re.MULTILINE)
#: This machine's pip configuration names find-links folders it may lack: not a finding.
PIP_NOISE = re.compile(r"^WARNING: Location '.*' is ignored")


class StepFailedError(RuntimeError):
    pass


def run(argv: list[str], cwd: Path, what: str) -> str:
    """Runs one step, echoing its output; a non-zero exit stops everything, named."""
    env = {k: v for k, v in os.environ.items() if k not in {"SHIPGATE_MUTANT", "PYTHONPATH"}}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    said = "\n".join(
        line for line in (done.stdout + done.stderr).splitlines() if not PIP_NOISE.match(line)
    )
    if said.strip():
        print(said, flush=True)
    if done.returncode != 0:
        raise StepFailedError(f"{what}: exit {done.returncode} ({' '.join(argv)})")
    return said


def files_git_sees(repo: Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files that exist, relative to ``repo``."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [f for f in out.split("\0") if f and (repo / f).is_file()]


def copy_tree(repo: Path, dest: Path) -> Path:
    for rel in files_git_sees(repo):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, dest / rel)
    return dest


def requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ @]", requirement.strip(), maxsplit=1)[0].lower()


def requirements(pyproject: Path, source: Path, extra: str = "test") -> list[str]:
    """What ``pyproject`` declares ([project] dependencies and the ``extra``), with this
    repository's distributions replaced by their folders under ``source``."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project")
    if not project:
        raise StepFailedError(f"{pyproject}: no [project] table: it declares no dependencies")
    wanted = [
        *project.get("dependencies", []),
        *project.get("optional-dependencies", {}).get(extra, []),
    ]
    return [str(source / LOCAL[n]) if (n := requirement_name(r)) in LOCAL else r for r in wanted]


def not_importable(python: Path, modules: tuple[str, ...], cwd: Path) -> None:
    found = [
        m
        for m in modules
        if subprocess.run(
            [str(python), "-c", f"import {m}"], cwd=cwd, capture_output=True, check=False
        ).returncode
        == 0
    ]
    if found:
        raise StepFailedError(f"importable where they must not be: {', '.join(found)}")


def new_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    return where / "bin"


def pip_install(bin_: Path, *args: str) -> None:
    run(
        [
            str(bin_ / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *args,
        ],
        ROOT,
        "pip install",
    )


def framework(work: Path) -> None:
    source = copy_tree(ROOT, work / "src")
    bin_ = new_venv(work / "venv")
    pip_install(bin_, str(source))
    project = work / "project"
    project.mkdir()
    not_importable(bin_ / "python", NOT_WITH_THE_FRAMEWORK, project)  # an empty directory
    print(f"adopter_venv: framework alone: none of {', '.join(NOT_WITH_THE_FRAMEWORK)} imports")
    (project / "pyproject.toml").write_text('[project]\nname = "adopter"\nversion = "0.0.1"\n')
    git = ["git", "-c", "user.email=ci@example.invalid", "-c", "user.name=ci"]
    run([*git, "init", "-q", "."], project, "git init")
    run([str(bin_ / "pv"), "init"], project, "pv init")
    run([*git, "add", "-A"], project, "git add")
    run([*git, "commit", "-qm", "pv init"], project, "git commit")
    contracts = sorted(str(p.relative_to(project)) for p in (project / "contracts").glob("*.yaml"))
    run([str(bin_ / "pv"), "validate", *contracts], project, "pv validate")
    run([str(bin_ / "gates"), "check", "GATE-EXAMPLE-001"], project, "gates check")
    run(
        [str(bin_ / "gates"), "audit", "--files", *contracts, "--out", str(work / "audit.json")],
        project,
        "gates audit",
    )


def example(work: Path, name: str) -> None:
    directory = (ROOT / name).resolve()
    source = copy_tree(ROOT, work / "src")
    bin_ = new_venv(work / "venv")
    torch_spec = os.environ.get("TORCH_SPEC", "torch==2.13.0")
    pip_install(bin_, *os.environ.get("TORCH_PIP_ARGS", "").split(), torch_spec)
    pip_install(bin_, *requirements(directory / "pyproject.toml", source))
    not_importable(bin_ / "python", ("trainer",), work)
    python = str(bin_ / "python")
    contracts = sorted(
        str(p.relative_to(directory)) for p in (directory / "contracts").glob("*.yaml")
    )
    run([python, "-m", "gates.cli.pv", "validate", *contracts], directory, "pv validate")
    run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], directory, "pytest")
    for contract in contracts:
        for gate in GATE_ID.findall((directory / contract).read_text(encoding="utf-8")):
            run(
                [python, "-m", "gates.cli.gates", "check", gate, "--files", contract],
                directory,
                f"gates check {gate}",
            )
    freeze = run(
        [python, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        directory,
        "pip list",
    )
    print(f"adopter_venv: {name} in its own virtualenv: {' '.join(freeze.split())}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", help="'framework', or an example's directory (examples/nanogpt)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shipgate-adopter-") as tmp:
        try:
            if args.what == "framework":
                framework(Path(tmp))
            else:
                example(Path(tmp), args.what)
        except StepFailedError as e:
            print(f"adopter_venv: {args.what}: {e}", file=sys.stderr)
            return 1
    print(f"adopter_venv: {args.what}: every step passed ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
