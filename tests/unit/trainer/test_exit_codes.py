"""trainer/exit_codes.py: every status has one name, and the trainer's own never reuse a
framework number (an aborted run once exited 3, pv's and gates' INTERNAL).

Run: .venv/bin/pytest tests/unit/trainer/test_exit_codes.py
"""

from gates import exit_codes as framework
from trainer import exit_codes


def _codes(module) -> dict[str, int]:
    return {name: value for name, value in vars(module).items() if name.isupper()}


def test_each_number_has_one_name():
    codes = _codes(exit_codes)
    assert len(set(codes.values())) == len(codes), codes


def test_the_trainers_own_statuses_collide_with_no_framework_code():
    shared = _codes(framework)
    own = {name: value for name, value in _codes(exit_codes).items() if name not in shared}
    assert own == {"ALERT_STOPPED": 4, "ABORTED": 5, "SAVE_FAILED": 6, "SIGNALLED_BASE": 128}
    assert not set(own.values()) & set(shared.values())
    assert {name: _codes(exit_codes)[name] for name in shared} == shared, "re-exported as is"
