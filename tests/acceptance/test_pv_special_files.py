"""pv reads only regular files (issue 20, item 3): a FIFO, a device, a socket, a symlink loop or
a dangling symlink — given as a contract, lying beside one, or standing where evidence or a
mutant module should be — is a FILE-NOT-REGULAR finding naming it (or, where it is not a
contract, the finding of what it stands for), never a hang, an unbounded read or exit 3.

Each case runs the real command in a subprocess with a deadline and a memory cap, so a hang or
a read of /dev/zero fails the test instead of stopping the suite or the machine.

Run: .venv/bin/pytest tests/acceptance/test_pv_special_files.py
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "pv_project"
#: A FIFO with no writer blocks a plain open() forever; a read of /dev/zero never ends.
DEADLINE_S = 20
#: /dev/zero read whole would take every byte of memory: the child dies at 1 GiB instead.
MEMORY_CAP = 1 << 30


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def pv(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gates.cli.pv", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
        preexec_fn=_cap_memory,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink_loop(path: Path) -> None:
    partner = path.with_name(path.stem + "-partner.yaml")
    path.symlink_to(partner.name)
    partner.symlink_to(path.name)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _dangling(path: Path) -> None:
    path.symlink_to(path.with_name("nowhere.yaml").name)


def _socket(path: Path) -> None:
    # A socket's path must fit in sun_path (108 bytes): bind by a name relative to its folder.
    here = Path.cwd()
    os.chdir(path.parent)
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path.name)
        sock.close()  # the socket file stays until it is unlinked
    finally:
        os.chdir(here)


SPECIAL: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (_fifo, "FIFO"),
    "symlink-loop": (_symlink_loop, "symlink loop"),
    "dev-zero": (_dev_zero, "character device"),
    "dangling-symlink": (_dangling, "dangling symlink"),
    "socket": (_socket, "socket"),
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The pv fixture project's valid contract, its test, mutants and evidence, in a temp dir."""
    root = tmp_path / "proj"
    (root / "contracts").mkdir(parents=True)
    shutil.copy(FIXTURE / "pyproject.toml", root)
    shutil.copytree(FIXTURE / "tests", root / "tests")
    shutil.copytree(FIXTURE / "evidence" / "C-DEMO", root / "evidence" / "C-DEMO")
    shutil.copy(FIXTURE / "contracts" / "valid" / "demo-v1.yaml", root / "contracts")
    return root


def report(proc: subprocess.CompletedProcess) -> dict:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_a_special_file_given_as_a_contract_is_a_finding_naming_it(project: Path, kind: str):
    make, words = SPECIAL[kind]
    special = project / "contracts" / f"{kind}-v1.yaml"
    make(special)
    proc = pv("validate", "--format", "json", special, "contracts/demo-v1.yaml", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    findings = report(proc)["findings"]
    assert [(f["file"], f["rule"]) for f in findings] == [(str(special), "FILE-NOT-REGULAR")]
    assert words in findings[0]["message"]
    # Two-sided: the regular contract beside it is read and checked as always.
    assert report(proc)["files"] == [str(special), "contracts/demo-v1.yaml"]


def test_every_kind_of_special_file_in_the_default_glob_is_one_finding_each(project: Path):
    for kind, (make, _) in SPECIAL.items():
        make(project / "contracts" / f"{kind}-v1.yaml")
    proc = pv("validate", "--format", "json", cwd=project)  # contracts/*.yaml
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_file = {f["file"]: f["rule"] for f in report(proc)["findings"]}
    special = {p for p in map(str, Path(project, "contracts").iterdir()) if "demo" not in p}
    special = {str(Path(p).relative_to(project)) for p in special}
    assert by_file == dict.fromkeys(special, "FILE-NOT-REGULAR")


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_a_special_file_beside_a_contract_leaves_its_validation_unchanged(project: Path, kind: str):
    alone = pv("validate", "--format", "json", "contracts/demo-v1.yaml", cwd=project)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    SPECIAL[kind][0](project / "contracts" / f"{kind}-v1.yaml")
    beside = pv("validate", "--format", "json", "contracts/demo-v1.yaml", cwd=project)
    assert (beside.returncode, report(beside)) == (0, report(alone))


def test_a_dependency_on_a_sibling_still_resolves_among_special_files(project: Path):
    # The sibling scan (depends_on may name a contract beside the given one) reads every
    # *.yaml in the folder: the special ones are skipped, the regular sibling still counts.
    contract = project / "contracts" / "demo-v1.yaml"
    text = contract.read_text()
    assert "  depends_on: []\n" in text
    contract.write_text(text.replace("  depends_on: []\n", "  depends_on: [C-OTHER]\n"))
    other = project / "contracts" / "other-v1.yaml"
    other.write_text(text.replace("id: C-DEMO", "id: C-OTHER"))
    for kind, (make, _) in SPECIAL.items():
        make(project / "contracts" / f"{kind}-v1.yaml")
    proc = pv("validate", "--format", "json", "contracts/demo-v1.yaml", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report(proc)["findings"] == []
    other.unlink()  # and the scan does look: without the sibling, the reference dangles
    proc = pv("validate", "--format", "json", "contracts/demo-v1.yaml", cwd=project)
    assert [f["rule"] for f in report(proc)["findings"]] == ["REF-DANGLING"]


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_special_evidence_is_an_evidence_finding_naming_the_file(project: Path, kind: str):
    make, words = SPECIAL[kind]
    evidence = project / "evidence" / "C-DEMO" / "GATE-DEMO-001.json"
    evidence.unlink()
    make(evidence)
    proc = pv("validate", "--format", "json", "contracts/demo-v1.yaml", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (finding,) = report(proc)["findings"]
    assert finding["rule"] == "EVIDENCE-INVALID"
    assert "evidence/C-DEMO/GATE-DEMO-001.json" in finding["message"]
    assert words in finding["message"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_special_file_among_the_mutant_modules_is_a_project_config_finding(
    project: Path, kind: str
):
    make, words = SPECIAL[kind]
    make(project / "tests" / "mutants" / "stuck.py")
    proc = pv("validate", "--format", "json", "contracts/demo-v1.yaml", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rules = {f["rule"] for f in report(proc)["findings"]}
    messages = " ".join(f["message"] for f in report(proc)["findings"])
    assert rules == {"PROJECT-CONFIG"}
    assert "tests/mutants/stuck.py" in messages and words in messages


@pytest.mark.parametrize("kind", ["fifo", "dangling-symlink"])
def test_a_special_pyproject_is_a_project_config_finding(project: Path, kind: str):
    make, words = SPECIAL[kind]
    (project / "pyproject.toml").unlink()
    make(project / "pyproject.toml")
    proc = pv("validate", "--format", "json", "--root", ".", "contracts/demo-v1.yaml", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    findings = report(proc)["findings"]
    assert {f["rule"] for f in findings} == {"PROJECT-CONFIG"}
    assert "pyproject.toml" in findings[0]["message"] and words in findings[0]["message"]
