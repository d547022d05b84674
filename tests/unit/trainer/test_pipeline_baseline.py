"""The pipeline's baseline compares like with like: the trigram is fitted on exactly the
sequences the loop trained on, and both are scored on the loop's own validation set."""

from __future__ import annotations

import pytest

from tests.unit.trainer.loop_support import (
    Recorder,
    encode_test_corpus,
    loop_config,
    one_thread,  # noqa: F401 - autouse fixture
    tiny_config,
)
from trainer.pipeline.baseline import consumed_indices, validation_indices
from trainer.train.loop import train
from trainer.train.sequences import ShardSequences

SEQ_LEN = 32


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    data, _ = encode_test_corpus(tmp_path_factory.mktemp("baseline"))
    return data


@pytest.mark.parametrize(("micro_batch", "grad_accum", "steps"), [(2, 2, 12), (3, 1, 40)])
def test_consumed_indices_are_the_sequences_the_loop_read(shards, micro_batch, grad_accum, steps):
    train_data = ShardSequences(shards, "train", SEQ_LEN)
    val_data = ShardSequences(shards, "val", SEQ_LEN)
    # 40 steps x 3 sequences runs past one epoch: the replay must follow the wrap too
    assert steps * micro_batch * grad_accum > train_data.num_sequences or steps == 12
    run = loop_config(
        {
            "model": tiny_config(vocab_size=train_data.manifest.vocab_size),
            "data.seq_len": SEQ_LEN,
            "data.micro_batch": micro_batch,
            "training.gradient_accumulation": grad_accum,
            "training.max_steps": steps,
            "training.epochs": 10,
            "training.eval_interval": steps,
            "training.eval_tokens": 50,
        }
    )
    recorder = Recorder()
    train(run, train_data, val_data, hooks=recorder)
    read = [i for s in sorted(recorder.batches) for mb in recorder.batches[s][1] for i in mb]
    assert (
        consumed_indices(
            train_data,
            steps=steps,
            micro_batch=micro_batch,
            grad_accum=grad_accum,
            seed=run.training.seed,
        )
        == read
    )
    ((_, batches, _),) = recorder.evaluations
    evaluated = sum(inputs.shape[0] for inputs, _ in batches)
    assert validation_indices(val_data, 50, micro_batch) == list(range(evaluated))
