"""Reproducible gate artifacts (gates.provenance.recipes): `gates check` / `promote` without
--artifact rebuild a gate's artifact from the recipe its measurer declares into a
content-addressed cache, reuse the cache, and say when a rebuild digests differently from the
evidence.

The widget project (tests/acceptance/widget_project.py) gets a tiny recipe: a script that
writes N lines to {out} and counts its runs in a file named by $WIDGET_BUILDS.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gates import check as gate_check
from gates import measure, promotion
from gates.provenance import evidence, freshness, recipes
from gates.pv.validate import validate
from gates.refusal import RefusedError
from tests.acceptance import widget_project

GATE = "GATE-WIDGET-001"
MAKE_WIDGET = """\
import os, sys, time
from pathlib import Path
with open(os.environ["WIDGET_BUILDS"], "a") as fh:
    fh.write("build\\n")
time.sleep(float(os.environ.get("WIDGET_SLEEP", "0")))
if os.environ.get("WIDGET_FAIL"):
    print("widget recipe: no widgets today", file=sys.stderr)
    sys.exit(3)
n = int(os.environ.get("WIDGET_LINES", "5"))
style = Path("widget_style.txt").read_text().strip()  # code the build reads, not an input
Path(sys.argv[1]).write_text("".join(f"{style} {i}\\n" for i in range(n)))
"""
RECIPE = recipes.Recipe(command=("python", "make_widget.py", "{out}"), seed=7, name="widget.txt")


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    root = tmp_path / "widget"
    root.mkdir()
    contract = widget_project.build(root)
    (root / "make_widget.py").write_text(MAKE_WIDGET)
    (root / "widget_style.txt").write_text("line\n")
    widget_project.git(root, "add", "make_widget.py", "widget_style.txt")
    widget_project.git(root, "-c", "user.name=t", "-c", "user.email=t@t.invalid",
                       "commit", "-qm", "recipe")  # fmt: skip
    spec = importlib.util.spec_from_file_location(
        "widget_measurement", root / "widget_measurement.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers the GATE-WIDGET-* measurements in-process
    monkeypatch.setitem(
        measure.REGISTRY, GATE, dataclasses.replace(measure.REGISTRY[GATE], recipe=RECIPE)
    )
    monkeypatch.setenv("SHIPGATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WIDGET_BUILDS", str(tmp_path / "builds.txt"))
    return root, contract


def builds(root: Path) -> int:
    counter = root.parent / "builds.txt"
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def check(root: Path, contract: Path, *artifacts: Path) -> gate_check.CheckResult:
    c = validate([contract]).contracts[0]
    return gate_check.check(root, c, c.gate(GATE), list(artifacts), command=["gates", "check"])


def cache_entries(root: Path) -> list[str]:
    cache = root.parent / "cache"
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_no_artifact_anywhere_is_built_from_the_recipe_then_reused_from_the_cache(project):
    root, contract = project
    first = check(root, contract)
    assert first.verdict == "PASS"
    assert builds(root) == 1
    (entry,) = first.evidence["artifacts"]
    assert entry["name"] == "widget.txt" and "path" not in entry  # in the cache: no path
    assert entry["sha256"] == recipes.digest(root.parent / "cache" / entry["sha256"] /
                                             "widget.txt")[0]  # fmt: skip
    assert entry["recipe"]["command"] == ["python", "make_widget.py", "{out}"]
    assert entry["recipe"]["seed"] == 7
    assert entry["recipe"]["inputs"] == [
        {"path": "make_widget.py", "sha256": evidence.sha256_of(root / "make_widget.py")[0]}
    ]
    assert evidence.schema_errors(first.evidence) == []
    assert not any("/" in arg and Path(arg).is_absolute() for arg in json.dumps(entry).split('"'))
    # A second check finds the build by its recipe: no second build.
    again = check(root, contract)
    assert again.verdict == "PASS" and builds(root) == 1
    assert again.evidence["artifacts"][0]["sha256"] == entry["sha256"]
    assert [e for e in cache_entries(root) if not e.startswith(".")] == [
        entry["sha256"],
        "by-recipe",
    ]


def test_gates_checked_side_by_side_share_one_build(project, monkeypatch):
    """Two `gates check` of gates on one recipe at once (gates.runner.checkrun): the second waits
    for the first's build and reads it from the cache instead of building it again."""
    root, _ = project
    monkeypatch.setenv("WIDGET_SLEEP", "1")
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = list(pool.map(lambda _: recipes.obtain(root, RECIPE, log=lambda line: None), "ab"))
    assert builds(root) == 1, "each waiter built the artifact again"
    assert sorted(b.source for b in built) == ["built", "cache"]
    assert built[0].sha256 == built[1].sha256


def test_a_build_records_every_file_it_read_and_the_evidence_carries_them(project):
    root, contract = project
    result = promotion.promote(root, contract, GATE, [], command=["gates", "promote", GATE])
    (entry,) = result.evidence["artifacts"]
    assert [s["path"] for s in entry["build_sources"]] == ["make_widget.py", "widget_style.txt"]
    assert entry["build_sources"][1]["sha256"] == evidence.sha256_of(root / "widget_style.txt")[0]
    assert evidence.schema_errors(result.evidence) == []
    assert freshness.stale_sources(root, result.evidence) == []


def test_a_warm_cache_built_from_other_code_is_rebuilt_not_served(project):
    """A one-line change in a file the build read (not a declared input, so the recipe key is
    the same): the cached artifact is another function's output and is built again."""
    root, _ = project
    notes: list[str] = []
    assert _obtain(root, notes).source == "built" and builds(root) == 1
    assert _obtain(root, notes).source == "cache" and builds(root) == 1, "unchanged: served"
    (root / "widget_style.txt").write_text("row\n")
    again = _obtain(root, notes)
    assert again.source == "built" and builds(root) == 2
    assert any("built from other code (widget_style.txt changed)" in n for n in notes), notes
    assert again.path.read_text().startswith("row 0"), "measured: what this code builds"


def test_editing_the_code_an_artifact_was_built_from_makes_its_evidence_stale(project):
    root, contract = project
    result = promotion.promote(root, contract, GATE, [], command=["gates", "promote", GATE])
    assert freshness.stale_sources(root, result.evidence) == []
    (root / "widget_style.txt").write_text("row\n")
    assert freshness.stale_sources(root, result.evidence) == [
        ("widget_style.txt", "changed (read by the build of artifact widget.txt)")
    ]


def test_a_cache_entry_without_a_build_record_is_rebuilt(project):
    root, _ = project
    notes: list[str] = []
    first = _obtain(root, notes)
    (first.path.parent / recipes.BUILD_RECORD).unlink()  # as an older gates left its entries
    again = _obtain(root, notes)
    assert again.source == "built" and builds(root) == 2
    assert any("records no build (built by an older gates)" in n for n in notes), notes


def test_a_cache_entry_built_with_another_installed_version_is_rebuilt(project):
    """The build imports an installed distribution (jsonschema): its version is part of the
    build record and of the evidence, and an entry built with another version (its record
    edited, as after an upgrade) is built again, not served."""
    root, contract = project
    script = root / "make_widget.py"
    script.write_text("import jsonschema  # an installed distribution the build imports\n"
                      + MAKE_WIDGET)  # fmt: skip
    installed = importlib.metadata.version("jsonschema")
    notes: list[str] = []
    first = _obtain(root, notes)
    assert first.build.distributions.get("jsonschema") == installed
    assert "torch" not in first.build.distributions  # only what the build imported
    record_path = first.path.parent / recipes.BUILD_RECORD
    record = json.loads(record_path.read_text())
    assert record["distributions"]["jsonschema"] == installed
    assert _obtain(root, notes).source == "cache" and builds(root) == 1, "unchanged: served"
    record["distributions"]["jsonschema"] = "0.0.1"
    record_path.write_text(json.dumps(record))
    again = _obtain(root, notes)
    assert again.source == "built" and builds(root) == 2
    assert any(
        f"built with other installed packages (jsonschema 0.0.1 -> {installed})" in n for n in notes
    ), notes
    result = check(root, contract)
    (entry,) = result.evidence["artifacts"]
    assert entry["build_distributions"]["jsonschema"] == installed
    assert evidence.schema_errors(result.evidence) == []


def test_a_promotion_with_no_evidence_builds_and_the_next_check_uses_the_recorded_digest(
    project,
):
    root, contract = project
    result = promotion.promote(root, contract, GATE, [], command=["gates", "promote", GATE])
    assert result.verdict == "PASS" and builds(root) == 1
    (root.parent / "cache" / "by-recipe").rename(root.parent / "by-recipe-aside")
    assert check(root, contract).verdict == "PASS"  # found by the evidence's digest
    assert builds(root) == 1


def _recipe_output_at(root: Path, relative: str) -> Path:
    """A copy, at ``relative`` under the root, of what the recipe builds from this tree."""
    built = recipes.obtain(root, RECIPE, log=lambda line: None)
    art = root / relative
    art.parent.mkdir(parents=True, exist_ok=True)
    art.write_bytes(built.path.read_bytes())
    return art


def test_a_recorded_path_that_is_gone_is_rebuilt_and_measured(project):
    root, contract = project
    art = _recipe_output_at(root, "runs/widget.txt")
    promotion.promote(root, contract, GATE, [art], command=["gates", "promote", GATE])
    recorded = json.loads((root / "evidence/C-WIDGET/GATE-WIDGET-001.json").read_text())
    assert recorded["artifacts"][0]["path"] == "runs/widget.txt"
    assert check(root, contract).verdict == "PASS" and builds(root) == 1  # still there
    art.unlink()
    (root.parent / "cache").rename(root.parent / "cache-aside")
    result = check(root, contract)
    assert result.verdict == "PASS" and builds(root) == 2
    assert result.evidence["artifacts"][0]["sha256"] == recorded["artifacts"][0]["sha256"]
    assert result.notices == [] and "notes" not in result.evidence


def test_a_rebuild_with_another_digest_is_measured_and_noted(project, monkeypatch):
    root, contract = project
    monkeypatch.setenv("WIDGET_LINES", "4")  # the build depends on more than the code
    promotion.promote(root, contract, GATE, [], command=["gates", "promote", GATE])
    monkeypatch.delenv("WIDGET_LINES")
    (root.parent / "cache").rename(root.parent / "cache-aside")
    result = check(root, contract)
    assert builds(root) == 2
    assert result.verdict == "PASS"
    assert result.evidence["measurements"]["line_count"]["value"] == 5  # the rebuilt one
    (notice,) = result.notices
    assert "not bitwise reproducible" in notice and "measured against the threshold" in notice
    assert notice in result.evidence["notes"]
    # The same when the code changed: the note names the input.
    (root / "make_widget.py").write_text(MAKE_WIDGET + "# changed\n")
    monkeypatch.setenv("WIDGET_LINES", "6")
    changed = check(root, contract)
    assert "the code changed" in changed.notices[0] and "make_widget.py" in changed.notices[0]
    assert changed.evidence["measurements"]["line_count"]["value"] == 6


def test_a_rebuild_that_misses_the_threshold_fails(project, monkeypatch):
    root, contract = project
    monkeypatch.setenv("WIDGET_LINES", "2")
    result = check(root, contract)
    assert result.verdict == "FAIL" and builds(root) == 1


def test_a_failing_recipe_is_refused_with_its_stderr_and_nothing_is_cached(project, monkeypatch):
    root, contract = project
    monkeypatch.setenv("WIDGET_FAIL", "1")
    with pytest.raises(RefusedError, match=r"(?s)exited with 3.*no widgets today"):
        check(root, contract)
    assert builds(root) == 1
    # no entry, no index, no half-built temp directory: only the (empty) lock files
    assert [e for e in cache_entries(root) if e != recipes.LOCK_DIR] == []


def test_an_explicit_artifact_is_never_rebuilt_and_says_nothing_records_its_build(project):
    root, contract = project
    art = root.parent / "given.txt"
    art.write_text("a\nb\nc\n")
    result = check(root, contract, art)
    assert result.verdict == "PASS" and builds(root) == 0
    (entry,) = result.evidence["artifacts"]
    assert entry["name"] == "given.txt" and "path" not in entry  # outside the root
    assert entry["recipe"]["command"][0] == "python"
    assert "build_sources" not in entry  # nothing vouches for what built it
    (notice,) = result.notices
    assert "nothing records that GATE-WIDGET-001's recipe built it" in notice
    assert notice.endswith("measured as is") and notice in result.evidence["notes"]


def test_a_promotion_refuses_an_artifact_no_build_from_this_tree_made(project):
    """The contract's own evidence vouches for the code at its commit: an artifact of
    unknown make is refused, and nothing is written."""
    root, contract = project
    art = root / "runs" / "widget.txt"
    art.parent.mkdir()
    art.write_text("".join(f"line {i}\n" for i in range(5)))  # the right bytes, unrecorded
    before = contract.read_text()
    with pytest.raises(RefusedError, match="nothing records that GATE-WIDGET-001's"):
        promotion.promote(root, contract, GATE, [art], command=["gates", "promote", GATE])
    assert contract.read_text() == before and builds(root) == 0
    assert not (root / "evidence" / "C-WIDGET" / f"{GATE}.json").exists()


def test_a_given_artifact_a_build_from_this_tree_made_carries_that_build_record(project, caplog):
    """Content-addressed: the same bytes as a cache entry built from this tree are that
    build; the evidence records its build sources, so editing them makes it stale, and the
    next check rebuilds instead of measuring the path as is."""
    root, contract = project
    art = _recipe_output_at(root, "runs/widget.txt")
    result = promotion.promote(root, contract, GATE, [art], command=["gates", "promote", GATE])
    (entry,) = result.evidence["artifacts"]
    assert entry["path"] == "runs/widget.txt"
    assert [s["path"] for s in entry["build_sources"]] == ["make_widget.py", "widget_style.txt"]
    assert freshness.stale_sources(root, result.evidence) == []
    (root / "widget_style.txt").write_text("row\n")
    assert freshness.stale_sources(root, result.evidence) == [
        ("widget_style.txt", "changed (read by the build of artifact widget.txt)")
    ]
    caplog.clear()
    again = check(root, contract)
    assert builds(root) == 2, "the recorded path was measured although other code built it"
    assert (
        "artifact runs/widget.txt was built from other code (widget_style.txt changed): "
        "rebuilt from its recipe" in caplog.text
    ), caplog.text
    assert again.evidence["artifacts"][0]["sha256"] != entry["sha256"]
    assert "path" not in again.evidence["artifacts"][0]  # the rebuild, from the cache


def test_an_artifact_that_changes_while_measured_is_still_refused(project, monkeypatch):
    root, contract = project
    check(root, contract)  # build once
    real = measure.REGISTRY[GATE]

    def tamper(ctx):
        out = real.fn(ctx)
        ctx.artifacts[0].write_text("tampered\n")
        return out

    monkeypatch.setitem(measure.REGISTRY, GATE, dataclasses.replace(real, fn=tamper))
    with pytest.raises(RefusedError, match="changed while it was being measured"):
        check(root, contract)


def test_a_recipe_must_write_to_out_and_say_why_it_leaves_bytes_out():
    with pytest.raises(ValueError, match="out"):
        recipes.Recipe(command=("python", "make.py"))
    with pytest.raises(ValueError, match="says why"):
        recipes.Recipe(command=("python", "make.py", "{out}"), exclude=("*.db",))
    with pytest.raises(ValueError, match="inside"):
        recipes.Recipe(command=("python", "make.py", "{out}"), select="../x")
    with pytest.raises(ValueError, match="why_not_bitwise"):
        recipes.Recipe(command=("python", "m.py", "{out}"), bitwise_across_machines=False)


# --- the digest --------------------------------------------------------------------------

RULES = recipes.Recipe(
    command=("python", "make.py", "{out}"),
    exclude=("train/*.db",),
    volatile={"train/*.jsonl": ("step_s",), "manifest.json": ("created",)},
    reason="timings and the run store",
)


def _artifact(tmp_path: Path) -> Path:
    a = tmp_path / "art"
    (a / "train").mkdir(parents=True)
    (a / "train" / "runs.db").write_bytes(b"sqlite-ish\x00")
    (a / "train" / "metrics.jsonl").write_text(
        '{"step": 1, "loss": 2.5, "step_s": 0.01}\n{"step": 2, "loss": 2.25, "step_s": 0.02}\n'
    )
    (a / "manifest.json").write_text(
        json.dumps({"created": "2026-01-01T00:00:00Z", "nested": {"created": 1, "seed": 3}})
    )
    (a / "weights.bin").write_bytes(bytes(range(256)))
    return a


def test_without_rules_the_digest_is_the_evidence_hash(tmp_path):
    a = _artifact(tmp_path)
    assert recipes.digest(a) == evidence.sha256_of(a)
    assert recipes.digest(a / "weights.bin") == evidence.sha256_of(a / "weights.bin")


@pytest.mark.parametrize(
    ("change", "same"),
    [
        (lambda a: (a / "train" / "runs.db").write_bytes(b"other"), True),
        (lambda a: (a / "train" / "runs.db").unlink(), True),
        (
            lambda a: (a / "train" / "metrics.jsonl").write_text(
                '{"step_s": 9.9, "step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.25, "step_s": 7}\n'
            ),
            True,
        ),
        (
            lambda a: (a / "manifest.json").write_text(
                json.dumps({"nested": {"seed": 3, "created": 2}, "created": "later"}, indent=2)
            ),
            True,
        ),
        (
            lambda a: (a / "train" / "metrics.jsonl").write_text(
                '{"step": 1, "loss": 2.5, "step_s": 0.01}\n'
                '{"step": 2, "loss": 2.26, "step_s": 0.02}\n'
            ),
            False,
        ),
        (
            lambda a: (a / "manifest.json").write_text(
                json.dumps({"created": "2026-01-01T00:00:00Z", "nested": {"created": 1, "seed": 4}})
            ),
            False,
        ),
        (lambda a: (a / "weights.bin").write_bytes(bytes(range(255)) + b"\x00"), False),
        (lambda a: (a / "extra.txt").write_text(""), False),
        (lambda a: (a / "weights.bin").rename(a / "weights2.bin"), False),
        (lambda a: (a / "train" / "other.db").write_text("x"), True),  # matches the glob
        (lambda a: (a / "top.db").write_text("x"), False),  # does not
    ],
)
def test_the_digest_ignores_excluded_files_and_volatile_keys_and_nothing_else(
    tmp_path, change, same
):
    a = _artifact(tmp_path)
    before = recipes.digest(a, RULES)
    assert before != recipes.digest(a)  # the rules are applied
    change(a)
    assert (recipes.digest(a, RULES) == before) is same


def test_a_volatile_file_that_is_not_json_is_an_error(tmp_path):
    a = _artifact(tmp_path)
    (a / "manifest.json").write_text("{not json")
    with pytest.raises(recipes.RecipeError, match="not JSON"):
        recipes.digest(a, RULES)


# --- the real loop run -------------------------------------------------------------------


@pytest.mark.slow
def test_two_builds_of_the_loop_run_in_different_directories_digest_the_same(tmp_path):
    """tools/make_loop_run.py under LOOP_RUN's digest rules: nothing written depends on
    the directory or the clock (about 6 s a build on 2 cores)."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from tests.measurements.training_loop_checkpoint import LOOP_RUN  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2]
    digests = []
    for name in ("first", "a-longer-second-name"):
        out = tmp_path / name / "run"
        env = os.environ | {"SHIPGATE_HOME": str(tmp_path / f"home-{name}")}
        argv = [a.replace("{out}", str(out)) for a in LOOP_RUN.command]
        subprocess.run([sys.executable, *argv[1:]], cwd=root, env=env, check=True,
                       capture_output=True, timeout=600)  # fmt: skip
        assert not any(str(tmp_path) in p.read_text(errors="replace")
                       for p in out.rglob("*") if p.is_file() and p.suffix != ".db")  # fmt: skip
        digests.append(recipes.digest(out, LOOP_RUN))
    assert digests[0] == digests[1]


# --- nothing outside the cache (issue 31) --------------------------------------------------


def _obtain(root: Path, notes: list[str], want: str | None = None) -> recipes.Built:
    """recipes.obtain, its notes collected; any error fails the test (it must not crash)."""
    try:
        return recipes.obtain(root, RECIPE, want, log=notes.append)
    except Exception as exc:  # a crash on a bad cache is the bug shown here
        pytest.fail(f"obtain crashed on a bad cache entry: {exc!r}")


def _digested(monkeypatch) -> list[Path]:
    """Every path recipes.digest is asked to hash from now on (resolved)."""
    seen: list[Path] = []
    real = recipes.digest

    def spy(path: Path, recipe: recipes.Recipe | None = None) -> tuple[str, int]:
        seen.append(Path(path).resolve())
        return real(path, recipe)

    monkeypatch.setattr(recipes, "digest", spy)
    return seen


def _outside(root: Path) -> Path:
    outside = root.parent / "outside"
    outside.mkdir(exist_ok=True)
    return outside


def test_an_index_holding_a_path_is_a_miss_never_followed(project, monkeypatch):
    root, _ = project
    notes: list[str] = []
    first = _obtain(root, notes)
    index = root.parent / "cache" / "by-recipe" / recipes.key(RECIPE, root)
    assert index.read_text() == first.sha256 + "\n"
    # 64 characters, as a digest is, naming a planted artifact outside the cache.
    forged = "../outside/" + "x" * (64 - len("../outside/"))
    planted = root.parent / "outside" / forged.rsplit("/", 1)[1] / RECIPE.artifact_name
    planted.parent.mkdir(parents=True)
    planted.write_text(first.path.read_text())
    index.write_text(forged + "\n")
    digested = _digested(monkeypatch)
    again = _obtain(root, notes)
    assert again.source == "built" and builds(root) == 2
    assert [p for p in digested if p.is_relative_to(root.parent / "outside")] == []
    assert any("not a sha256 digest" in note for note in notes), notes
    # Two-sided: the index is rewritten, and a digest it holds is used again.
    assert index.read_text() == first.sha256 + "\n"
    assert _obtain(root, notes).source == "cache" and builds(root) == 2


@pytest.mark.parametrize("link", ["entry", "artifact"])
def test_a_cache_entry_through_a_symlink_leading_out_is_rebuilt_not_read(
    project, monkeypatch, link
):
    root, _ = project
    notes: list[str] = []
    first = _obtain(root, notes)
    entry, outside = first.path.parent, _outside(root)
    if link == "entry":  # the whole entry: a link to a directory holding the right bytes
        entry.rename(outside / "entry")
        entry.symlink_to(outside / "entry")
        kept = outside / "entry" / RECIPE.artifact_name
    else:  # a real entry whose artifact is a link to a file holding the right bytes
        kept = outside / RECIPE.artifact_name
        first.path.rename(kept)
        first.path.symlink_to(kept)
    digested = _digested(monkeypatch)
    again = _obtain(root, notes, want=first.sha256)
    assert again.source == "built" and builds(root) == 2
    assert any("symlink" in note for note in notes), notes
    assert [p for p in digested if p.is_relative_to(outside)] == []
    assert kept.read_text() == again.path.read_text()  # what the link led to: untouched
    assert not entry.is_symlink() and not again.path.is_symlink()
    assert again.path == first.path and again.sha256 == first.sha256
    # Two-sided: the rebuilt entry is a hit.
    assert _obtain(root, notes, want=first.sha256).source == "cache" and builds(root) == 2


def test_an_index_directory_that_is_a_symlink_leading_out_is_never_written_through(
    project, monkeypatch
):
    root, _ = project
    outside = _outside(root)
    by_recipe = root.parent / "cache" / "by-recipe"
    by_recipe.parent.mkdir()
    by_recipe.symlink_to(outside)
    notes: list[str] = []
    built = _obtain(root, notes)
    assert list(outside.iterdir()) == []
    assert by_recipe.is_dir() and not by_recipe.is_symlink()
    assert (by_recipe / recipes.key(RECIPE, root)).read_text() == built.sha256 + "\n"
    assert _obtain(root, notes).source == "cache" and builds(root) == 1


LINKING = """\
import os, sys
from pathlib import Path
out, how, victim = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
if how == "is-a-link":
    os.symlink(victim, out)
else:
    out.mkdir()
    (out / "real.txt").write_text("made here\\n")
    if how == "behind-a-link":
        os.symlink(victim.parent, out / "data")
    elif how == "holds-a-link":
        os.symlink(victim, out / "link.txt")
"""


@pytest.mark.parametrize(
    ("how", "select"),
    [("is-a-link", None), ("behind-a-link", "data/victim.txt"), ("holds-a-link", None),
     ("real", None)],
)  # fmt: skip
def test_a_build_whose_artifact_is_or_holds_a_symlink_is_refused_and_moves_nothing(
    tmp_path, how, select
):
    (tmp_path / "make.py").write_text(LINKING)
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("not the build's\n")
    recipe = recipes.Recipe(
        command=("python", "make.py", "{out}", how, str(victim)), select=select, name="art"
    )
    cache = tmp_path / "cache"
    if how == "real":  # two-sided: a real directory of real files is built and cached
        try:
            built = recipes.build(tmp_path, recipe, cache, log=lambda line: None)
        except recipes.RecipeError as exc:
            pytest.fail(f"a build of real files was refused: {exc}")
        assert (built.path / "real.txt").read_text() == "made here\n"
        assert [p.name for p in cache.iterdir()] == [built.sha256]
    else:
        with pytest.raises(recipes.RecipeError, match="symlink"):
            recipes.build(tmp_path, recipe, cache, log=lambda line: None)
        assert list(cache.iterdir()) == []  # no entry, no temporary build directory
    assert victim.read_text() == "not the build's\n"


@pytest.mark.parametrize(
    ("name", "content", "place"),
    [
        ("manifest.json", "[" * 200_000, "manifest.json:1:257"),
        ("train/metrics.jsonl", '{"step": 1}\n' + "[" * 200_000, "metrics.jsonl:2:257"),
    ],
)
def test_a_volatile_file_nested_200000_deep_is_an_error_naming_it(tmp_path, name, content, place):
    a = _artifact(tmp_path)
    (a / name).write_text(content)
    try:
        recipes.digest(a, RULES)
    except recipes.RecipeError as exc:
        assert f"{place}: JSON nested deeper than 256 levels" in str(exc), exc
    except Exception as exc:  # a RecursionError names no file: the bug shown here
        pytest.fail(f"digest crashed: {exc!r}")
    else:
        pytest.fail("digested a volatile file nested 200,000 deep")


def test_another_installed_version_of_a_listed_package_is_another_build(project, monkeypatch):
    """The cache key holds the installed versions of the framework's and the project's
    listed packages: after an upgrade (torch here) the entry built by the old one is not
    served, and a rebuild is what gets measured."""
    root, _ = project
    notes: list[str] = []
    first = _obtain(root, notes)
    assert first.source == "built" and _obtain(root, notes).source == "cache"
    installed = evidence.metadata.version

    def upgraded(name: str) -> str:
        return "99.0.0" if name == "torch" else installed(name)

    monkeypatch.setattr(evidence.metadata, "version", upgraded)
    assert evidence.package_versions()["torch"] == "99.0.0"
    assert _obtain(root, notes).source == "built"
    monkeypatch.setattr(evidence.metadata, "version", installed)
    assert _obtain(root, notes).source == "cache"  # the old entry is still the old key's
