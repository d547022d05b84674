"""Hashes the trainer records in files that outlive a release (a checkpoint's config_hash, a
pipeline stage's key, the run store's config digest and derived run ids) keep their bytes:
a resume compares a checkpoint's config_hash with the config's, so a changed canonical
form would refuse every older checkpoint. Pinned values, computed as they were recorded."""

from __future__ import annotations

from trainer.checkpoint.state import config_hash
from trainer.pipeline.state import stage_key
from trainer.store.identity import identity_of
from trainer.store.rundir import config_sha256

CONFIG = {"b": "é", "a": [1, 2.5, None], "c": {"z": True, "y": "x"}}
PINNED = "956a7a699ee572225ed9d9ea5c59eca2157a36e6be9667ba6d59814662d1dbfc"


def test_config_hash_and_stage_key_keep_their_recorded_form():
    assert config_hash(CONFIG) == PINNED
    assert stage_key(CONFIG) == PINNED


def test_the_run_store_s_config_digest_leaves_out_only_the_per_launch_apply_section():
    assert config_sha256({**CONFIG, "apply": {"out_dir": "runs/x"}}) == PINNED
    assert config_sha256(None) is None


def test_a_run_id_derived_for_an_old_manifest_keeps_its_recorded_form(tmp_path):
    manifest = {"created": "2026-11-01T00:00:00Z", "host": {"name": "h"}, "seed": 1, "config": {}}
    run_id, started = identity_of(manifest, tmp_path / "run.json")
    assert run_id == "55cc1b8e2e9db1cd357b323d32aa4f27"
    assert started == "2026-11-01T00:00:00Z"
