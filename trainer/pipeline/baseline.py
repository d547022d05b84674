"""The model against a Kneser-Ney trigram, on the same validation targets.

    result = measure_baseline(run_config, checkpoint, steps=600)
    result["model"]["perplexity"], result["kn_trigram"]["perplexity"], result["ratio"]

Both are scored on one set: the validation split's first sequences until
``training.eval_tokens`` targets (the loop's rule for its own validation set), each
sequence predicted from its own tokens only. The trigram (trainer/oracle/ngram.py, the
baseline of FALSIFY-TRAIN-LOOP-017) is fitted on exactly the training sequences the run
consumed - the loop's step driver and epoch order replayed for ``steps`` steps - so the
comparison is model vs counting on equal data, not on the whole corpus. The model is the
checkpoint's weights, evaluated by the loop's own loss (trainer/train/loss.py).

A ratio above 1 is reported as it is: a 2-layer model trained for minutes on a CPU may
well lose to a trigram on code, and the summary says so rather than hide it.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.checkpoint.load import load_checkpoint
from trainer.model.llama import build_model
from trainer.oracle.ngram import KneserNeyTrigram
from trainer.train import loss
from trainer.train.sequences import ShardSequences, epoch_order
from trainer.train.steps import iterate_steps


def validation_indices(val: ShardSequences, max_tokens: int, micro_batch: int) -> list[int]:
    """The loop's validation set (loop._validation_batches): sequences 0, 1, ... taken a
    micro-batch at a time until ``max_tokens`` targets are in, or the whole split."""
    per_batch = micro_batch * val.seq_len  # shards hold no padding: every position is a target
    wanted = max(1, math.ceil(max_tokens / per_batch)) * micro_batch
    return list(range(min(wanted, val.num_sequences)))


def consumed_indices(
    train: ShardSequences, *, steps: int, micro_batch: int, grad_accum: int, seed: int
) -> list[int]:
    """The training sequences steps 1..``steps`` read, in the loop's order (one process)."""
    epochs = max(1, math.ceil(steps * micro_batch * grad_accum / train.num_sequences))
    orders: dict[int, torch.Tensor] = {}
    out: list[int] = []
    for plan in iterate_steps(
        train.num_sequences,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        epochs=epochs,
        last_step=steps,
    ):
        if plan.epoch not in orders:
            orders[plan.epoch] = epoch_order(train.num_sequences, seed=seed, epoch=plan.epoch)
        order = orders[plan.epoch]
        for positions in plan.micro_batches(0):
            out.extend(int(i) for i in order[positions.start : positions.stop])
    return out


def kn_log_loss(kn: KneserNeyTrigram, windows: list[np.ndarray]) -> tuple[float, int]:
    """Mean negative log-likelihood of every token after the first of each window."""
    total, count = 0.0, 0
    for window in windows:
        tokens = [int(t) for t in window]
        for i in range(1, len(tokens)):
            total -= math.log(kn.token_prob(tokens[i], tokens[max(0, i - 2) : i]))
            count += 1
    return total / count, count


def model_log_loss(
    run_config: Any, checkpoint: Path, val: ShardSequences, indices: list[int]
) -> tuple[float, int]:
    model = build_model(run_config.model, device="cpu", seed=run_config.training.seed)
    load_checkpoint(checkpoint, model, None, restore_random=False)
    model.eval()
    batch = run_config.data.micro_batch
    batches = (val.batch(indices[i : i + batch]) for i in range(0, len(indices), batch))
    with torch.no_grad():
        return loss.evaluate_loss(model, batches)


def measure_baseline(run_config: Any, checkpoint: Path, *, steps: int) -> dict:
    """Model and KN trigram perplexity on the same validation targets (see module doc)."""
    shards, seq_len = Path(run_config.data.shards), run_config.data.seq_len
    train = ShardSequences(shards, "train", seq_len)
    val = ShardSequences(shards, "val", seq_len)
    if val.num_sequences == 0:
        raise ValueError(f"{shards}: the val split holds no sequence of {seq_len + 1} tokens")
    indices = validation_indices(val, run_config.training.eval_tokens, run_config.data.micro_batch)
    started = time.perf_counter()
    model_loss, model_count = model_log_loss(run_config, checkpoint, val, indices)
    model_s = time.perf_counter() - started

    started = time.perf_counter()
    seen = consumed_indices(
        train,
        steps=steps,
        micro_batch=run_config.data.micro_batch,
        grad_accum=run_config.training.gradient_accumulation,
        seed=run_config.training.seed,
    )
    kn = KneserNeyTrigram.fit(
        (train.window(i).tolist() for i in seen), vocab_size=run_config.model.vocab_size
    )
    kn_loss, kn_count = kn_log_loss(kn, [val.window(i) for i in indices])
    kn_s = time.perf_counter() - started
    if kn_count != model_count:  # one target set, or the comparison means nothing
        raise RuntimeError(f"scored {model_count} targets for the model, {kn_count} for KN")
    return {
        "validation": {"sequences": len(indices), "targets": model_count, "seq_len": seq_len},
        "model": {
            "checkpoint": str(checkpoint),
            "loss": model_loss,
            "perplexity": math.exp(model_loss),
            "seconds": round(model_s, 2),
        },
        "kn_trigram": {
            "training_sequences": len(seen),
            "training_tokens": len(seen) * seq_len,
            "discount": kn.discount,
            "loss": kn_loss,
            "perplexity": math.exp(kn_loss),
            "seconds": round(kn_s, 2),
        },
        "ratio": math.exp(model_loss) / math.exp(kn_loss),
    }
