"""gates.runner.testrun.is_assertion: which failures are the test's own check firing (a mutant
killed) and which are crashes, including a crash a helper turned into ``pytest.fail``."""

from __future__ import annotations

import pytest

from gates.runner import testrun


class WrappedError(RuntimeError):
    """A library error that wraps whatever went wrong inside it (as CheckpointError does)."""


def failed_while_handling(inner: BaseException, *, wrap: bool = False) -> BaseException:
    """The pytest.fail a helper raises in ``except Exception:`` around ``inner``."""
    try:
        try:
            raise inner
        except BaseException as exc:
            if wrap:
                raise WrappedError("saving failed") from exc
            raise
    except BaseException:
        try:
            pytest.fail("the call failed")
        except pytest.fail.Exception as failed:
            return failed
    raise AssertionError("unreachable")


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("exc", "refusals", "assertion"),
    [
        (raised(AssertionError("x != 1")), (), True),
        (raised(pytest.fail.Exception("DID NOT RAISE")), (), True),
        (raised(AttributeError("no attribute")), (), False),
        (failed_while_handling(AttributeError("no attribute")), (), False),
        (failed_while_handling(AttributeError("no attribute"), wrap=True), (), False),
        # the test's own guard (an AssertionError) raised inside a wrapping library
        (failed_while_handling(AssertionError("torch.save was called"), wrap=True), (), True),
        (failed_while_handling(ValueError("refused")), (), False),
        (failed_while_handling(ValueError("refused")), (ValueError,), True),
        (failed_while_handling(ValueError("refused"), wrap=True), (ValueError,), True),
        (raised(ValueError("refused")), (ValueError,), True),
        (raised(ValueError("refused")), (KeyError,), False),
        (ExceptionGroup("two", [AssertionError("a"), AssertionError("b")]), (), True),
        (ExceptionGroup("two", [AssertionError("a"), TypeError("b")]), (), False),
    ],
    ids=[
        "assert", "did-not-raise", "crash", "crash-turned-into-fail", "wrapped-crash-as-fail",
        "wrapped-assertion-as-fail", "refusal-undeclared", "refusal-declared",
        "wrapped-refusal-declared", "refusal-raised", "other-refusal", "group-of-assertions",
        "group-with-a-crash",
    ],
)  # fmt: skip
def test_only_the_tests_own_checks_are_assertions(exc, refusals, assertion):
    assert testrun.is_assertion(exc, refusals) is assertion


def test_a_fail_called_after_a_skip_was_caught_is_still_an_assertion():
    try:
        try:
            pytest.skip("not here")
        except pytest.skip.Exception:
            pytest.fail("checked by hand")
    except pytest.fail.Exception as failed:
        assert testrun.is_assertion(failed)


def test_the_recorded_failure_names_the_crash_it_was_raised_while_handling():
    failure = testrun.failure_of(
        "t.py::t", "call", failed_while_handling(AttributeError("'NoneType' has no attribute"))
    )
    assert failure.assertion is False and failure.exception == "Failed"
    assert failure.message == (
        "the call failed (while handling AttributeError: 'NoneType' has no attribute)"
    )
