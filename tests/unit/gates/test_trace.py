"""gates.provenance.trace (what a measurement read) and gates.provenance.freshness (is evidence
still about it)."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gates.provenance import freshness, trace


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git work tree with tracked files, one untracked, and what gates writes itself."""
    root = tmp_path / "repo"
    for rel in (
        "read.txt",
        "unread.txt",
        "child.txt",
        "killed.txt",
        "contracts/c-v1.yaml",
        "evidence/C-X/GATE-X-001.json",
        ".gates.lock",
        "pkg/__init__.py",
        "pkg/mod.py",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    (root / "untracked.txt").write_text("never added\n")
    return root


def python(root: Path, code: str) -> None:
    subprocess.run([sys.executable, "-c", code], cwd=root, check=False, timeout=60)


def paths(recorded: list[dict]) -> list[str]:
    return [s["path"] for s in recorded]


def test_records_this_process_and_python_children_even_killed_ones(repo: Path):
    with trace.recording(repo) as traced:
        (repo / "read.txt").read_text()
        python(repo, "open('child.txt').read()")
        python(repo, "import os; open('killed.txt').read(); os._exit(3)")
    recorded = traced.sources()
    assert paths(recorded) == ["child.txt", "killed.txt", "read.txt"]
    for s in recorded:
        assert s["sha256"] == hashlib.sha256((repo / s["path"]).read_bytes()).hexdigest()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_of_this_process_reports_through_the_trace_directory(repo: Path):
    with trace.recording(repo) as traced:
        pid = os.fork()
        if pid == 0:  # the child: its memory is lost at exit, its report is not
            try:
                (repo / "child.txt").read_text()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    assert paths(traced.sources()) == ["child.txt"]


LIMITED = (  # a file-size limit that a write past fails with EFBIG, as on a full disk
    "import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (10, 10)); "
)


def _lost(recording: trace.Recording, run) -> OSError:
    """The OSError ending ``recording`` when ``run`` (inside it) loses a report."""
    try:
        with recording:
            run()
    except OSError as exc:
        return exc
    pytest.fail("a report cut short by a full disk went unnoticed: its sources are incomplete")


def test_a_child_that_cannot_write_its_report_fails_the_recording_naming_it(repo: Path):
    """Issue 31: a traced process past a file-size limit loses its report; the recording
    says so, naming the report, rather than returning sources with files missing."""
    error = _lost(trace.recording(repo), lambda: python(repo, LIMITED + "open('child.txt')"))
    assert error.errno == errno.EFBIG and error.filename.endswith(".paths"), error
    assert "sources would be incomplete" in error.strerror


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_that_cannot_write_its_report_fails_the_recording_naming_it(repo: Path):
    def fork_limited() -> None:
        pid = os.fork()
        if pid == 0:
            try:
                exec(LIMITED)
                (repo / "child.txt").read_text()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    error = _lost(trace.recording(repo), fork_limited)
    assert error.errno == errno.EFBIG and error.filename.endswith(".paths"), error


def test_imports_count_through_their_byte_code_cache(repo: Path):
    code = "import sys; sys.path.insert(0, '.'); import pkg.mod"
    python(repo, "import compileall; compileall.compile_dir('pkg', quiet=1)")  # despite
    # PYTHONDONTWRITEBYTECODE, which only stops an import from writing one
    assert list((repo / "pkg" / "__pycache__").glob("mod.*.pyc"))
    with trace.recording(repo) as traced:
        python(repo, code)  # now served from the .pyc
    assert paths(traced.sources()) == ["pkg/__init__.py", "pkg/mod.py"]


def test_what_gates_writes_untracked_files_and_files_outside_never_count(repo: Path, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    with trace.recording(repo) as traced:
        for rel in ("contracts/c-v1.yaml", "evidence/C-X/GATE-X-001.json", ".gates.lock"):
            (repo / rel).read_text()
        (repo / "untracked.txt").read_text()
        outside.read_text()
        (repo / "read.txt").read_text()
    assert paths(traced.sources()) == ["read.txt"]


def test_without_git_hidden_directories_and_caches_do_not_count(tmp_path: Path):
    root = tmp_path / "plain"
    for rel in ("a.txt", ".venv/lib.py", "__pycache__/x.txt", "contracts/c.yaml"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    with trace.recording(root) as traced:
        for rel in ("a.txt", ".venv/lib.py", "__pycache__/x.txt", "contracts/c.yaml"):
            (root / rel).read_text()
    assert paths(traced.sources()) == ["a.txt"]


def test_the_environment_is_restored_even_after_an_error(repo: Path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.delenv(trace.DIR_VAR, raising=False)
    with pytest.raises(RuntimeError), trace.recording(repo):
        assert os.environ["PYTHONPATH"].endswith(os.pathsep + "/somewhere")
        assert os.environ[trace.DIR_VAR]
        raise RuntimeError("the measurement broke")
    assert os.environ["PYTHONPATH"] == "/somewhere"
    assert trace.DIR_VAR not in os.environ
    with trace.recording(repo) as traced:
        pass
    (repo / "read.txt").read_text()  # after the block: not recorded
    assert traced.sources() == []


def test_detached_recordings_at_once_each_see_only_their_own_children(repo: Path, monkeypatch):
    """The parallel audit: one detached recording per run, side by side, none in
    os.environ; an outer attached recording does not collect what they saw."""
    monkeypatch.delenv(trace.DIR_VAR, raising=False)
    before = dict(os.environ)

    def child(traced: trace.Recording, name: str) -> subprocess.Popen:
        env = {**os.environ, **traced.env}
        code = f"import time; open({name!r}).read(); time.sleep(0.5)"
        return subprocess.Popen([sys.executable, "-c", code], cwd=repo, env=env)

    with (
        trace.recording(repo) as outer,
        trace.recording(repo, detached=True) as first,
        trace.recording(repo, detached=True) as second,
    ):
        assert trace.DIR_VAR not in before and os.environ[trace.DIR_VAR] == str(outer.trace_dir)
        running = [child(first, "child.txt"), child(second, "killed.txt")]
        (repo / "read.txt").read_text()  # this process: the outer one's alone
        assert [p.wait(timeout=60) for p in running] == [0, 0]
    assert dict(os.environ) == before
    assert paths(first.sources()) == ["child.txt"]
    assert paths(second.sources()) == ["killed.txt"]
    assert paths(outer.sources()) == ["read.txt"]


def test_a_recording_adds_up_over_blocks_and_functions_count_by_their_file(repo: Path):
    traced = trace.recording(repo)
    with traced:
        (repo / "read.txt").read_text()
    (repo / "unread.txt").read_text()  # between the blocks
    with traced:
        python(repo, "open('child.txt').read()")
    assert paths(traced.sources()) == ["child.txt", "read.txt"]

    namespace: dict = {}
    exec(compile("def measure(ctx): pass", str(repo / "pkg" / "mod.py"), "exec"), namespace)
    assert "pkg/mod.py" in paths(traced.sources(namespace["measure"]))


def test_a_projects_own_sitecustomize_still_runs(repo: Path, tmp_path: Path, monkeypatch):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("open('read.txt').read()\n")
    monkeypatch.setenv("PYTHONPATH", str(own))
    with trace.recording(repo) as traced:
        python(repo, "pass")
    assert paths(traced.sources()) == ["read.txt"]


def evidence_with(sources: list[dict] | None) -> dict:
    ev = {"git": {"commit": "ab" * 20, "dirty": False}}
    if sources is not None:
        ev["sources"] = sources
    return ev


def test_stale_sources_names_changed_and_gone_files_and_evidence_without_sources(repo: Path):
    recorded = trace.sources(repo, {str(repo / "read.txt"), str(repo / "child.txt")})
    ev = evidence_with(recorded)
    assert freshness.stale_sources(repo, ev) == []

    (repo / "read.txt").write_text("edited\n")
    (repo / "child.txt").unlink()
    stale = freshness.stale_sources(repo, ev)
    assert stale == [("child.txt", "gone"), ("read.txt", "changed")]
    assert freshness.describe(ev, stale) == (
        "child.txt gone since commit abababababab (also read.txt changed)"
    )
    (repo / "read.txt").write_text("# read.txt\n")  # reverted: fresh again
    (repo / "child.txt").write_text("# child.txt\n")
    assert freshness.stale_sources(repo, ev) == []

    assert freshness.stale_sources(repo, evidence_with(None)) == [("", freshness.NO_SOURCES)]
    # An empty list says no more than none: nothing vouches for it being fresh (issue 33).
    assert freshness.stale_sources(repo, evidence_with([])) == [("", freshness.NO_SOURCES)]
    outside = evidence_with([{"path": "../escape.txt", "sha256": "0" * 64}])
    assert freshness.stale_sources(repo, outside) == [
        ("../escape.txt", "not a path in the project")
    ]
    directory = evidence_with([{"path": "pkg", "sha256": "0" * 64}])
    assert freshness.stale_sources(repo, directory) == [("pkg", "gone")]


def test_an_edit_that_keeps_the_size_and_puts_the_mtime_back_is_still_stale(repo: Path):
    """freshness caches each file's digest by what stat says of it: an edit of the same size
    whose mtime is set back to the old one (``touch -r``, an mtime-keeping copy or unpack)
    must not be served the digest from before it, in the same process."""
    recorded = trace.sources(repo, {str(repo / "read.txt")})
    ev = evidence_with(recorded)
    assert freshness.stale_sources(repo, ev) == []  # the digest is now cached
    before = os.stat(repo / "read.txt")
    text = (repo / "read.txt").read_text()
    (repo / "read.txt").write_text(text.upper())  # same size, other bytes
    os.utime(repo / "read.txt", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(repo / "read.txt").st_size == before.st_size
    assert freshness.stale_sources(repo, ev) == [("read.txt", "changed")]
    (repo / "read.txt").write_text(text)
    assert freshness.stale_sources(repo, ev) == []


def test_distributions_names_what_a_child_imported_from_site_packages(repo: Path):
    """A build recording (installed=True) hears its children's imports of installed
    distributions, at the versions installed; a recording without it hears only the project."""
    import importlib.metadata  # noqa: PLC0415

    version = importlib.metadata.version("jsonschema")
    env_base = os.environ | {"PYTHONPATH": ""}
    seen = {}
    for installed in (True, False):
        traced = trace.recording(repo, detached=True, installed=installed)
        with traced:
            subprocess.run(
                [sys.executable, "-c", "import jsonschema; open('read.txt').read()"],
                cwd=repo, env=env_base | traced.env, check=True, timeout=120,
            )  # fmt: skip
        seen[installed] = traced.distributions()
        assert paths(traced.sources()) == ["read.txt"], "site-packages is never a source"
    assert seen[True].get("jsonschema") == version
    assert "torch" not in seen[True]
    assert seen[False] == {}


def test_distributions_maps_paths_to_their_owners_and_skips_metadata(tmp_path: Path):
    import importlib.metadata  # noqa: PLC0415

    site_dir = trace.site_dirs()[0]
    seen = [
        os.path.join(site_dir, "jsonschema", "__init__.py"),
        os.path.join(site_dir, "jsonschema-0.0.0.dist-info", "METADATA"),  # metadata, no import
        str(tmp_path / "jsonschema" / "elsewhere.py"),  # not under site-packages
    ]
    assert trace.distributions(seen) == {"jsonschema": importlib.metadata.version("jsonschema")}
    assert trace.distributions(seen[1:]) == {}
