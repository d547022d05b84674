"""`trainer validate CONFIG [--json]`: exit 0 for each tests/fixtures/configs/valid file,
exit 1 with exactly the `# expect: LINE FIELD CODE` findings of each invalid one, lines
in `file:line:column: error FIELD: message (hint)` form, never a traceback, no torch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
VALID = sorted((FIXTURES / "valid").glob("*.yaml"))
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))
_EXPECT = re.compile(rb"^# expect: (\d+) (\S+) (\S+)$", re.MULTILINE)
_LINE = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning) ?(?P<field>\S*): .+"
)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["validate", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def expected(path: Path) -> list[tuple[int, str, str]]:
    return sorted(
        (int(line), "" if field == b"-" else field.decode(), code.decode())
        for line, field, code in _EXPECT.findall(path.read_bytes())
    )


def test_there_are_fixtures_for_every_bad_input_of_issue_5():
    names = {p.stem for p in INVALID}
    for case in (
        "missing-keys",
        "wrong-types",
        "sizes-negative-and-zero",
        "heads-not-dividing-hidden",
        "kv-heads-not-dividing-heads",
        "syntax-error",
        "a-list",
        "unknown-keys",
    ):
        assert case in names
    assert all(expected(p) for p in INVALID), "every invalid fixture says what it expects"


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_configs_pass(capsys, path):
    rc, out, _ = run(capsys, str(path))
    assert rc == 0, out
    assert f"{path}: valid (schema, architecture, data-free C-TRAINCFG-001 rules)" in out
    assert "`trainer plan CONFIG` counts N from the shard manifest" in out
    assert " error " not in out


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_configs_fail_with_exactly_their_findings(capsys, path):
    rc, out, err = run(capsys, str(path))
    assert rc == 1
    assert "Traceback" not in out + err
    got = []
    for line in out.splitlines()[:-1]:
        m = _LINE.match(line)
        assert m, f"not file:line:column: severity FIELD: message: {line!r}"
        assert m["file"] == str(path)
        if m["sev"] == "error":
            got.append((int(m["line"]), m["field"]))
    assert out.splitlines()[-1].startswith(f"{path}: invalid (")
    assert sorted(got) == [(line, field) for line, field, _ in expected(path)]

    rc, out, _ = run(capsys, "--json", str(path))
    report = json.loads(out)
    assert rc == 1 and report["valid"] is False
    codes = sorted(
        (f["line"], f["field"], f["code"]) for f in report["findings"] if f["severity"] == "error"
    )
    assert codes == expected(path)


def test_the_seed_v1_numbers_are_refused_at_their_yaml_lines(capsys):
    path = FIXTURES / "invalid" / "seed-v1-warmup.yaml"
    rc, out, _ = run(capsys, str(path))
    assert rc == 1
    assert (
        f"{path}:17:3: error training.warmup_steps: warmup_steps: 2000 is 40 % of max_steps "
        "5000, more than 10 % (set warmup_steps <= 500; C-TRAINCFG-001 INV-CFG-004)"
    ) in out.splitlines()
    assert "7.02 tokens/param < 10" in out


def test_a_forced_token_budget_passes_with_a_warning_and_is_reported_as_forced(capsys):
    path = FIXTURES / "valid" / "seed-v2-370m-forced.yaml"
    rc, out, _ = run(capsys, "--json", str(path), "--device", "cuda")  # bf16: a GPU run
    report = json.loads(out)
    assert rc == 0 and report["valid"] is True
    assert report["algebra"]["forced"] is True
    assert report["params"] == 373_509_120
    (warning,) = report["findings"]
    assert warning["severity"] == "warning" and warning["field"] == "training.force_token_budget"
    assert report["not_checked"].startswith("steps per epoch")


def test_a_missing_config_is_exit_1_with_a_message(capsys, tmp_path):
    rc, out, _ = run(capsys, str(tmp_path / "nope.yaml"))
    assert rc == 1
    assert out.splitlines()[0].startswith(f"{tmp_path / 'nope.yaml'}: error: no such file")


def test_validate_runs_as_a_program_without_importing_torch():
    probe = (
        "import sys\n"
        "from trainer import cli\n"
        "rc = cli.main(['validate', sys.argv[1]])\n"
        "assert 'torch' not in sys.modules, 'trainer validate imported torch'\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for path, want in ((VALID[0], 0), (FIXTURES / "invalid" / "syntax-error.yaml", 1)):
        proc = subprocess.run(
            [sys.executable, "-c", probe, str(path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
            check=False,
        )
        assert proc.returncode == want, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr


EIGHT_GPUS = ROOT / "configs" / "llama-370m-8gpu.yaml"


def test_a_multi_process_config_is_checked_for_its_world_size(capsys):
    # 4 x 16 x 8 processes = 512 sequences a step: the token rule holds for 8 processes ...
    rc, out, _ = run(capsys, str(EIGHT_GPUS), "--world-size", "8")
    assert rc == 0, out
    assert "x 8 processes x seq_len 1024 = 524,288 tokens per step" in out
    assert "7,864,320,000 (21.06 per parameter)" in out
    # ... and refuses the same file for one process, whose global batch is 8 times smaller.
    rc, out, _ = run(capsys, str(EIGHT_GPUS))
    assert rc == 1
    assert "983,040,000 tokens for 373,509,120 parameters = 2.63 tokens/param < 10" in out


def test_world_size_below_one_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["validate", str(EIGHT_GPUS), "--world-size", "0"])
    assert stop.value.code == 2
    assert "0 processes: must be >= 1" in capsys.readouterr().err
