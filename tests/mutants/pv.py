"""Known bugs of pv itself, injected by `gates audit` (C-PV-VALIDATOR's mutants).

Each function receives a pytest.MonkeyPatch and breaks exactly one thing.
"""

from gates.model import schema, source
from gates.mutants import mutant
from gates.pv.checks import contract_rules, project_rules


def _nothing(*args, **kwargs):
    return iter(())


@mutant("changelog-gap-check-off")
def _changelog_gap_check_off(patch):
    patch.setattr(contract_rules, "changelog_gaps", _nothing)


@mutant("dangling-refs-accepted")
def _dangling_refs_accepted(patch):
    patch.setattr(contract_rules, "dangling_test_refs", _nothing)


@mutant("duplicate-ids-accepted")
def _duplicate_ids_accepted(patch):
    patch.setattr(contract_rules, "duplicate_ids", _nothing)


@mutant("unknown-keys-accepted")
def _unknown_keys_accepted(patch):
    # The source system's validator: unknown keys are silently ignored.
    real = schema.violations
    patch.setattr(
        schema,
        "violations",
        lambda validator, data, **kw: (
            v for v in real(validator, data, **kw) if v.kind != "unknown-key"
        ),
    )


@mutant("positions-off-by-one")
def _positions_off_by_one(patch):
    real = source.YamlSource.locate

    def shifted(self, where, *, at_key=True):
        line, column = real(self, where, at_key=at_key)
        return line + 1, column

    patch.setattr(source.YamlSource, "locate", shifted)


@mutant("evidence-not-compared")
def _evidence_not_compared(patch):
    # The source system: a gate says pass while its evidence says FAIL.
    patch.setattr(project_rules, "evidence_mismatches", _nothing)


@mutant("ship-blocking-marker-not-checked")
def _ship_blocking_marker_not_checked(patch):
    patch.setattr(project_rules, "ship_blocking_marked", _nothing)


@mutant("tab-guard-off")
def _tab_guard_off(patch):
    patch.setattr(source, "_check_tabs", lambda text: None)


@mutant("decode-guards-off")
def _decode_guards_off(patch):
    # Bytes decoded blindly: binary and non-UTF-8 input end in an exception.
    patch.setattr(source, "_decode", lambda raw: raw.decode("utf-8"))
