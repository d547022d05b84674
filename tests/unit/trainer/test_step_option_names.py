"""One meaning per name (issue 34): ``training.max_steps`` is the schedule's length,
``--stop-after`` the last step of this run. `trainer apply` and `trainer pipeline` take
``--stop-after N``; the old ``--max-steps`` is refused, naming the new option, never taken
for either meaning."""

from __future__ import annotations

import pytest

from trainer.cli import build_parser


@pytest.mark.parametrize("command", [["apply", "run.yaml"], ["pipeline"]])
def test_stop_after_is_the_option(command):
    args = build_parser().parse_args([*command, "--stop-after", "5"])
    assert args.stop_after == 5
    assert build_parser().parse_args(command).stop_after is None


@pytest.mark.parametrize("command", [["apply", "run.yaml"], ["pipeline"]])
def test_the_old_max_steps_option_is_refused_naming_stop_after(command, capsys):
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args([*command, "--max-steps", "5"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--max-steps is now --stop-after N" in err and "training.max_steps" in err
