"""`gates promote` on a full disk (issue 20): a file-size limit (RLIMIT_FSIZE, with SIGXFSZ
ignored, so a write past it fails with EFBIG as on a full filesystem, no root needed) makes
the promotion fail with exit 2, a message naming the file it could not write, no traceback,
and the project exactly as it was: the earlier evidence and contract kept byte for byte,
no temp file or journal left behind.

Two limits hit two stages: one below the trace hook the promotion writes to its temp dir
before it measures, one above it but below the evidence file (the measurement reads enough
tracked files for its evidence to outgrow the hook), so the commit itself is what fails.

`gates audit` likewise (issue 31: it once exited 3, "internal error: JSONDecodeError", having
parsed the seam check's report cut short by the limit): each file it writes — the seam
check's report, the trace hook, a traced run's report of the files it read, the audit
evidence — is in turn the first write past a limit, and each failure is exit 2 naming that
file, with the earlier audit kept byte for byte; a pytest run that cannot record its failure
names that file too.
"""

from __future__ import annotations

import errno
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gates.provenance import trace
from tests.acceptance import widget_project

GATE = "GATE-WIDGET-001"
EVIDENCE = Path("evidence") / "C-WIDGET" / f"{GATE}.json"
CONTRACT = Path("contracts") / "widget-v1.yaml"
HOOK_BYTES = len(trace.SITECUSTOMIZE.encode())
DATA_FILES = 40  # tracked files the measurement reads: each is one `sources` entry

MEASUREMENT = widget_project.MEASUREMENT.replace(
    "    (artifact,) = ctx.artifacts\n",
    "    (artifact,) = ctx.artifacts\n"
    "    for data in sorted(Path('data').glob('*.txt')):\n"
    "        data.read_text()\n",
)


def _promote(root: Path, artifact: Path, limit: int | None) -> subprocess.CompletedProcess:
    def size_limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "gates.cli.gates", "promote", GATE, "--artifact", str(artifact)],
        cwd=root,
        capture_output=True,
        text=True,
        preexec_fn=size_limited if limit is not None else None,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def promoted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The widget project, GATE-WIDGET-001 promoted once (no limit) and committed."""
    root = tmp_path_factory.mktemp("diskfull") / "widget"
    root.mkdir()
    widget_project.build(root)
    widget_project.use_measurement_dir(root, MEASUREMENT)
    (root / "data").mkdir()
    for i in range(DATA_FILES):
        (root / "data" / f"part-{i:03d}.txt").write_text(f"{i}\n")
    (root / "runs").mkdir()
    (root / "runs" / "lines.txt").write_text("a\nb\nc\n")
    widget_project.commit_all(root, "a measurement that reads tracked data")
    proc = _promote(root, root / "runs" / "lines.txt", limit=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    widget_project.commit_all(root, "promoted")
    _settle_index(root)
    return root


def _settle_index(root: Path) -> None:
    """A git status a second after the last change: it leaves an index git never rewrites
    (no entry racily clean), so a status under a size limit writes nothing."""
    time.sleep(1.1)
    subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain"], check=True, capture_output=True
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and ".git" not in p.parts
        and "__pycache__" not in p.parts
        and ".pytest_cache" not in p.parts
        and p.name != ".gates.lock"
    }


@pytest.mark.parametrize(
    ("limit", "unwritten"),
    [(HOOK_BYTES - 1, "sitecustomize.py"), (HOOK_BYTES + 200, f"{GATE}.json")],
    ids=["before-measuring", "at-the-commit"],
)
def test_a_promotion_that_cannot_write_fails_and_keeps_the_earlier_evidence(
    promoted: Path, tmp_path: Path, limit: int, unwritten: str
) -> None:
    evidence_bytes = len((promoted / EVIDENCE).read_bytes())
    assert evidence_bytes > HOOK_BYTES + 200, "the evidence must outgrow the hook"
    before = _snapshot(promoted)
    (promoted / "runs" / "lines.txt").write_text("a\nb\nc\nd\n")  # ignored: a new artifact
    try:
        proc = _promote(promoted, promoted / "runs" / "lines.txt", limit)
        after = _snapshot(promoted)
    finally:
        (promoted / "runs" / "lines.txt").write_text("a\nb\nc\n")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "File too large" in proc.stderr and unwritten in proc.stderr, proc.stderr
    after.pop("runs/lines.txt")
    before.pop("runs/lines.txt")
    assert after == before, "a failed promotion changed the project"
    status = subprocess.run(
        ["git", "-C", str(promoted), "status", "--porcelain", "--ignored"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    leftovers = [line for line in status.splitlines() if ".tmp" in line or "journal" in line]
    assert leftovers == []


def test_the_same_promotion_without_a_limit_succeeds(promoted: Path) -> None:
    """The positive control: the limit, not the project, is what failed above."""
    proc = _promote(promoted, promoted / "runs" / "lines.txt", limit=HOOK_BYTES * 4)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    widget_project.git(promoted, "reset", "-q", "--hard")
    _settle_index(promoted)


def test_a_git_status_that_cannot_write_the_index_is_an_io_error_not_a_dirty_tree(
    promoted: Path,
) -> None:
    """A tracked file touched (same bytes, new mtime) makes git rewrite its index on the
    next status; under the limit git fails, and gates says so instead of "uncommitted"."""
    index = (promoted / ".git" / "index").stat().st_size
    assert index > HOOK_BYTES + 512, "git's index must outgrow the trace hook: add DATA_FILES"
    widget = promoted / "widget.py"
    widget.touch()
    try:  # the hook is written, then git cannot rewrite its index
        proc = _promote(promoted, promoted / "runs" / "lines.txt", limit=(HOOK_BYTES + index) // 2)
    finally:  # git, stopped mid-write, may leave its lock; the module's other tests need git
        (promoted / ".git" / "index.lock").unlink(missing_ok=True)
        _settle_index(promoted)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "uncommitted" not in proc.stderr
    # git is killed by SIGXFSZ (subprocess restores its default) or says "File too large".
    assert "git status" in proc.stderr, proc.stderr
    assert "File too large" in proc.stderr or "SIGXFSZ" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# --- gates audit (issue 31) ----------------------------------------------------------------
#
# An audit writes, in order: the seam check's report (its child, in a temp dir), the trace
# hook, each traced pytest run's report of the files it read, then the audit evidence. A
# limit below each in turn makes that write the first to fail; the bound test reads enough
# tracked files that each traced report outgrows the hook, and the audit evidence (one
# `sources` entry and one index a row per file) outgrows every report.

AUDIT = Path("evidence") / "audit" / "audit.json"
AUDIT_TEST = widget_project.TEST.replace(
    "import pytest\n", "from pathlib import Path\n\nimport pytest\n"
).replace(
    "def test_count_lines(tmp_path):\n",
    "def test_count_lines(tmp_path):\n"
    "    for data in sorted(Path('data').glob('*.txt')):\n"
    "        data.read_text()\n",
)


def _audit(root: Path, limit: int | None) -> subprocess.CompletedProcess:
    def size_limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "gates.cli.gates", "audit", "--quiet", "--out", str(AUDIT)],
        cwd=root,
        capture_output=True,
        text=True,
        preexec_fn=size_limited if limit is not None else None,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The widget project whose bound test reads tracked data files, audited once (no
    limit) and committed. Enough files that one traced run's report, a line per absolute
    path, is at least twice the hook."""
    root = tmp_path_factory.mktemp("diskfull-audit") / "widget"
    root.mkdir()
    widget_project.build(root)
    (root / "tests" / "test_widget.py").write_text(AUDIT_TEST)
    line = len(f"{root}/data/part-000.txt\n")
    (root / "data").mkdir()
    for i in range(2 * (HOOK_BYTES // line + 1)):
        (root / "data" / f"part-{i:03d}.txt").write_text(f"{i}\n")
    widget_project.commit_all(root, "a bound test that reads tracked data")
    proc = _audit(root, limit=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    widget_project.commit_all(root, "audited")
    time.sleep(1.1)  # then a status that leaves git an index it never rewrites (not racy)
    subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain"], check=True, capture_output=True
    )
    return root


def _audit_cases() -> list[tuple[Callable[[Path], int], str, str]]:
    """(limit for the project, the file named, what it is for), in the order written."""
    return [
        (lambda root: 64, "seams.json", "the seam check's report"),
        (lambda root: HOOK_BYTES - 1, "sitecustomize.py", ""),
        (lambda root: HOOK_BYTES + 64, ".paths", "its sources would be incomplete"),
        (lambda root: len((root / AUDIT).read_bytes()) - 200, str(AUDIT), ""),
    ]


@pytest.mark.parametrize(
    ("limit", "unwritten", "what"),
    _audit_cases(),
    ids=["seam-report", "trace-hook", "traced-report", "audit-evidence"],
)
@pytest.mark.slow
def test_an_audit_that_cannot_write_fails_naming_the_file_and_keeps_the_earlier_audit(
    audited: Path, limit: Callable[[Path], int], unwritten: str, what: str
) -> None:
    data_files = len(list((audited / "data").iterdir()))
    assert data_files * len(f"{audited}/data/part-000.txt\n") > HOOK_BYTES + 64
    before = _snapshot(audited)
    proc = _audit(audited, limit(audited))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("gates: error:")]
    assert "File too large" in error and unwritten in error and what in error, proc.stderr
    assert _snapshot(audited) == before, "a failed audit changed the project"
    status = subprocess.run(
        ["git", "-C", str(audited), "status", "--porcelain", "--ignored"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [line for line in status.splitlines() if "__pycache__" not in line] == []


@pytest.mark.slow
def test_the_same_audit_without_a_limit_succeeds(audited: Path) -> None:
    """The positive control: the limits, not the project, are what failed above."""
    proc = _audit(audited, limit=len((audited / AUDIT).read_bytes()) * 4)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mutants killed: 1 of 1" in proc.stdout
    widget_project.git(audited, "checkout", "-q", "--", str(AUDIT))


RUN_NODE = """\
import sys
from pathlib import Path

from gates.runner import testrun

try:
    run = testrun.run_node(Path.cwd(), "tests/test_widget.py::test_count_lines", sys.argv[1])
except OSError as exc:
    print(f"OSError {exc.errno} {exc.filename}: {exc.strerror}")
else:
    print(f"{run.outcome} {[f.exception for f in run.failures]}")
"""


@pytest.mark.parametrize("limit", [100, None], ids=["limited", "control"])
def test_a_test_run_that_cannot_record_its_failure_names_the_file(audited: Path, limit):
    """The audit's pytest child appends each failure to a file the audit reads; one it cannot
    write (here the mutant's failure, past a 100-byte limit) is an OSError naming that file,
    never a verdict read from a line cut short. (In `gates audit` the trace hook, larger,
    fails first under a file-size limit; on a full disk any of them can.)"""

    def size_limited() -> None:
        if limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-c", RUN_NODE, "count-off-by-one"],
        cwd=audited,
        capture_output=True,
        text=True,
        preexec_fn=size_limited,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if limit is None:
        assert proc.stdout.strip() == "failed ['AssertionError']", proc.stdout
    else:
        assert proc.stdout.startswith(f"OSError {errno.EFBIG} "), proc.stdout
        assert "failures.jsonl: File too large (the test run's record" in proc.stdout
