"""gates.model.project: a project's [tool.shipgate] table says where its mutants and measurements
live; the framework discovers both the same way and holds none of its own."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from gates import measure, mutants
from gates.model import project

ROOT = Path(__file__).resolve().parents[3]


def write_project(root: Path, table: str, modules: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(table)
    for relative, text in modules.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a test imports or puts on sys.path is forgotten afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_without_a_table_both_defaults_hold(tmp_path: Path):
    config = project.load_config(tmp_path)
    assert config.directories == {
        "mutants": (tmp_path.resolve() / "tests" / "mutants",),
        "measurements": (tmp_path.resolve() / "tests" / "measurements",),
    }


def test_this_repository_keeps_its_measurements_outside_the_framework():
    config = project.load_config(ROOT)
    assert config.directories["measurements"] == (ROOT / "tests" / "measurements",)
    assert not (ROOT / "gates" / "measurements").exists()
    # Every gate of this project's contracts is found in the project's directory.
    found = project.discover(ROOT, "measurements")
    assert "GATE-TRAIN-LOOP-017" in found
    assert found["GATE-TRAIN-LOOP-017"].startswith("tests/measurements/training_loop_oracle.py:")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[tool.shipgate]\nmutant = ['m']\n", "unknown key(s) mutant"),
        ("[tool.shipgate]\nmutants = 'm'\n", "must be a list of directory names"),
        ("[tool.shipgate]\nmeasurements = ['/abs/m']\n", "relative directory inside"),
        ("[tool.shipgate]\nmeasurements = ['../m']\n", "relative directory inside"),
        ("[tool.shipgate]\nmeasurements = ['my-checks']\n", "Python identifiers"),
        ("[tool.shipgate\n", "not valid TOML"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_file(tmp_path: Path, table: str, message: str):
    (tmp_path / "pyproject.toml").write_text(table)
    with pytest.raises(project.ProjectConfigError, match=re.escape(message)) as raised:
        project.load_config(tmp_path)
    assert str(tmp_path / "pyproject.toml") in str(raised.value)


def test_discovery_reads_the_configured_directories_without_importing(tmp_path: Path):
    write_project(
        tmp_path,
        "[tool.shipgate]\nmutants = ['checks/bugs']\nmeasurements = ['checks/measure']\n",
        {
            "checks/bugs/a.py": """\
                raise RuntimeError("never imported by discovery")
                from gates.mutants import mutant

                @mutant("off-by-one")
                def _(patch): ...
                """,
            "checks/measure/b.py": """\
                import gates.measure

                @gates.measure.measures("GATE-X-001")
                def m(ctx): ...
                """,
            "tests/mutants/ignored.py": """\
                @mutant("not-configured")
                def _(patch): ...
                """,
        },
    )
    assert project.discover(tmp_path, "mutants") == {"off-by-one": "checks/bugs/a.py:4"}
    assert project.discover(tmp_path, "measurements") == {"GATE-X-001": "checks/measure/b.py:3"}
    assert mutants.discover(tmp_path) == {"off-by-one": "checks/bugs/a.py:4"}


def test_lookup_imports_the_projects_measurements_by_their_dotted_path(
    tmp_path: Path, isolated_imports: None
):
    write_project(
        tmp_path,
        "[tool.shipgate]\nmeasurements = ['lookupcheck/measure']\n",
        {
            "subject.py": "VALUE = 7\n",
            "lookupcheck/measure/common.py": "from subject import VALUE\n",
            "lookupcheck/measure/gate.py": """\
                from gates.measure import Measurement, measures

                from .common import VALUE


                @measures("GATE-LOOKUP-001")
                def m(ctx):
                    return Measurement(values={"v": (VALUE, "units")}, workload="w")
                """,
        },
    )
    measurer = measure.lookup("GATE-LOOKUP-001", tmp_path)
    assert measurer is not None
    assert measurer.fn(None).values == {"v": (7, "units")}
    assert sys.modules["lookupcheck.measure.gate"].__file__ == str(
        tmp_path.resolve() / "lookupcheck" / "measure" / "gate.py"
    )
    assert measure.lookup("GATE-NOBODY-MEASURES", tmp_path) is None


def test_another_projects_package_of_the_same_name_is_refused_not_mixed_up(
    tmp_path: Path, isolated_imports: None
):
    import tests  # this repository's own tests package  # noqa: PLC0415

    assert Path(tests.__file__).parent == ROOT / "tests"
    write_project(tmp_path, "", {"tests/mutants/m.py": "RAISED = False\n"})
    with pytest.raises(project.ProjectConfigError, match="already imported from"):
        mutants.load(tmp_path)
    assert "tests.mutants.m" not in sys.modules


def test_the_packages_a_project_names_are_recorded_beside_the_frameworks(tmp_path: Path):
    from gates.provenance import evidence  # noqa: PLC0415

    (tmp_path / "pyproject.toml").write_text("[tool.shipgate]\npackages = ['pytest', 'nope-x']\n")
    config = project.load_config(tmp_path)
    assert config.packages == ("pytest", "nope-x")
    recorded = evidence.host_info(config.packages)["packages"]
    assert recorded["pytest"] == pytest.__version__
    assert "jsonschema" in recorded  # the framework's own stay
    assert "nope-x" not in recorded  # not installed: left out, never invented


def _contract_stem(path: Path) -> str:
    """``contracts/training-loop-v1.yaml`` → ``training_loop``: a measurement module's prefix."""
    return re.sub(r"-v\d+$", "", path.stem).replace("-", "_")


def misnamed_measurements(root: Path) -> list[str]:
    """Each measurement module of ``root`` that is not named by the one contract whose gates
    it measures (``<contract>.py`` or ``<contract>_<part>.py``), or that measures no gate."""
    from ruamel.yaml import YAML  # noqa: PLC0415

    owner = {
        gate["id"]: _contract_stem(path)
        for path in sorted((root / "contracts").glob("*.yaml"))
        for gate in (YAML(typ="safe").load(path.read_text()) or {}).get("gates") or []
    }
    by_module: dict[str, set[str]] = {}
    for gate_id, where in project.discover(root, "measurements").items():
        by_module.setdefault(where.rsplit(":", 1)[0], set()).add(owner.get(gate_id, "?"))
    problems = []
    for file, _ in project.load_config(root).modules("measurements"):
        relative = str(file.relative_to(root.resolve()))
        contracts = by_module.get(relative, set())
        if len(contracts) != 1:
            problems.append(f"{relative}: measures gates of {sorted(contracts) or 'no contract'}")
        elif not re.fullmatch(rf"{next(iter(contracts))}(_[a-z0-9_]+)?", file.stem):
            problems.append(f"{relative}: measures {next(iter(contracts))}'s gates")
    return problems


def test_each_measurement_module_is_named_by_the_contract_it_measures(tmp_path: Path):
    """A reader looking for how GATE-TRAIN-LOOP-013 is measured opens
    tests/measurements/training_loop*.py; a module named by subsystem (checkpoint_gates.py
    measured training-loop gates beside arch_checkpoint_gates.py for another contract) or a
    helper among the measurements sends them searching. The check itself is shown to refuse
    a misnamed module and one that measures nothing, and to accept a correctly named one."""
    assert misnamed_measurements(ROOT) == []
    contract = "gates:\n  - id: GATE-W-001\n  - id: GATE-W-002\n"
    write_project(tmp_path, "", {"contracts/widget-v2.yaml": contract})
    modules = {
        "widget_parts.py": "@measures('GATE-W-001')\ndef m(ctx): ...\n",
        "helpers.py": "X = 1\n",
        "w_gates.py": "@measures('GATE-W-002')\ndef m(ctx): ...\n",
    }
    for name, text in modules.items():
        (tmp_path / "tests" / "measurements").mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / "measurements" / name).write_text(text)
    assert misnamed_measurements(tmp_path) == [
        "tests/measurements/helpers.py: measures gates of no contract",
        "tests/measurements/w_gates.py: measures widget's gates",
    ]


TWO_GATES = {
    "twomods/measure/helper.py": "VALUE = 3\n",
    "twomods/measure/first.py": """\
        from gates.measure import Measurement, measures

        from .helper import VALUE


        @measures("GATE-FIRST-001")
        def m(ctx):
            return Measurement(values={"v": (VALUE, "units")}, workload="w")
        """,
    "twomods/measure/second.py": """\
        from gates.measure import Measurement, measures


        @measures("GATE-SECOND-001")
        def m(ctx):
            return Measurement(values={"v": (2, "units")}, workload="w")
        """,
}
TWO_GATES_TABLE = "[tool.shipgate]\nmeasurements = ['twomods/measure']\n"


def test_lookup_imports_only_the_module_that_registers_the_gate(
    tmp_path: Path, isolated_imports: None, monkeypatch: pytest.MonkeyPatch
):
    """Importing every measurement module put all of them in every gate's traced sources:
    an edit to one staled all 36 gates of this project."""
    monkeypatch.setattr(measure, "REGISTRY", {})
    write_project(tmp_path, TWO_GATES_TABLE, TWO_GATES)
    measurer = measure.lookup("GATE-FIRST-001", tmp_path)
    assert measurer is not None and measurer.fn(None).values == {"v": (3, "units")}
    assert "twomods.measure.first" in sys.modules
    assert "twomods.measure.second" not in sys.modules
    assert sorted(measure.REGISTRY) == ["GATE-FIRST-001"]


def test_a_gates_traced_sources_are_its_module_and_what_it_imports(
    tmp_path: Path, isolated_imports: None, monkeypatch: pytest.MonkeyPatch
):
    from gates.provenance import trace  # noqa: PLC0415

    monkeypatch.setattr(measure, "REGISTRY", {})
    write_project(tmp_path, TWO_GATES_TABLE, TWO_GATES)
    module = measure.locate("GATE-FIRST-001", tmp_path)
    with trace.recording(tmp_path) as traced:
        measure.load("GATE-FIRST-001", tmp_path, module)
    paths = {s["path"] for s in traced.sources()}
    assert {"twomods/measure/first.py", "twomods/measure/helper.py"} <= paths
    assert "twomods/measure/second.py" not in paths


def test_a_gate_registered_twice_is_refused_naming_both_places(
    tmp_path: Path, isolated_imports: None, monkeypatch: pytest.MonkeyPatch
):
    """Only one module is imported; a second registration of the gate would be hidden (and
    not among the sources), so it is an error, not a choice."""
    monkeypatch.setattr(measure, "REGISTRY", {})
    again = TWO_GATES["twomods/measure/second.py"].replace("GATE-SECOND-001", "GATE-FIRST-001")
    write_project(tmp_path, TWO_GATES_TABLE, {**TWO_GATES, "twomods/measure/second.py": again})
    with pytest.raises(project.ProjectConfigError) as refused:
        measure.lookup("GATE-FIRST-001", tmp_path)
    message = str(refused.value)
    assert "GATE-FIRST-001 is registered more than once" in message
    assert "twomods/measure/first.py:6" in message and "twomods/measure/second.py:4" in message
    assert measure.lookup("GATE-SECOND-001", tmp_path) is None  # nothing else registers it


def test_a_registration_pv_cannot_read_is_found_by_importing_every_module(
    tmp_path: Path, isolated_imports: None, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(measure, "REGISTRY", {})
    computed = TWO_GATES["twomods/measure/second.py"].replace(
        '@measures("GATE-SECOND-001")', '@measures("GATE-" + "SECOND-001")'
    )
    write_project(tmp_path, TWO_GATES_TABLE, {**TWO_GATES, "twomods/measure/second.py": computed})
    assert measure.locate("GATE-SECOND-001", tmp_path) is None
    measurer = measure.lookup("GATE-SECOND-001", tmp_path)
    assert measurer is not None and measurer.fn(None).values == {"v": (2, "units")}
