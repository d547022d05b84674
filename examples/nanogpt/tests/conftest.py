"""Fixtures for the tests of C-NANOGPT-LOOP (contracts/nanogpt-training-loop-v1.yaml).

One intra-op thread: the 2-core machines this runs on are shared, and oversubscribed threads
made a tiny step ten times slower; the bitwise resume test also needs the same thread count
in every process it compares.
"""

import pytest
import torch

from tests.probe import Probe

torch.set_num_threads(1)


@pytest.fixture
def probe(monkeypatch):
    """A Probe installed on nanogpt_train for this test (see tests/probe.py)."""
    p = Probe()
    handle = p.install(monkeypatch)
    yield p
    handle.remove()
