"""A pytest plugin that runs the collected tests in reverse order (``make test-reversed``).

A test that leaves a shared fixture, a repository or the process changed passes only while
the tests after it happen not to care; xdist's scheduling moves those neighbours from run to
run, so such a test fails on someone else's machine. Reversing the order (each file whole in
one worker) puts every test after the ones that ran before it here.
"""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.reverse()
