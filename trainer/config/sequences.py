"""N, the training sequences of an encoded data directory, as the training loop counts them.

The loop reads the train split through trainer/train/sequences.py's ShardSequences:
sequence ``i`` is stream tokens ``[i*seq_len, i*seq_len + seq_len + 1)`` (each window's
last token is the next one's first), so a stream of T tokens holds
``N = (T - 1) // seq_len`` sequences, and trainer/train/steps.py makes an epoch
``N // (micro_batch * grad_accum * world_size)`` steps (tests/unit/trainer/
test_config_load.py checks N against ShardSequences.num_sequences). No torch import.

    n = sequences_in(Path("data/"), seq_len=1024)      # reads manifest.json only
"""

from __future__ import annotations

from pathlib import Path

from trainer.data.manifest import Manifest, load_manifest


def sequences_in(manifest_or_dir: Manifest | Path | str, seq_len: int) -> int:
    """Training sequences of ``seq_len + 1`` tokens in the train split. A directory's
    manifest is parsed and field-checked but its shards are not hashed (plan verifies
    them separately); raises trainer.data.shards.ShardError for a missing or bad manifest."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    manifest = (
        manifest_or_dir
        if isinstance(manifest_or_dir, Manifest)
        else load_manifest(Path(manifest_or_dir), verify=False)
    )
    train_tokens = manifest.data["splits"]["train"]["tokens"]
    return max(0, (train_tokens - 1) // seq_len)
