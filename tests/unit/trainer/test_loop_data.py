"""Validation is never trained on (C-TRAINING-LOOP FALSIFY-TRAIN-LOOP-002).

A real corpus of 40 documents, each opened by a sentinel (``DOC07X``) no other document
contains, is tokenized and encoded into shards with the project's own encoder, with the
val fraction chosen so that exactly 4 whole documents go to validation. The loop then
trains 3 epochs with wrap-around over ShardSequences, and the test decodes what every
step actually consumed: the documents seen in each epoch must be exactly the 36 training
documents, and no validation sentinel may appear in any training batch. The evaluation
batches must hold validation documents only. The split files themselves must hold whole
documents, each in exactly one split."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.unit.trainer.loop_support import (
    Recorder,
    loop_config,
    one_thread,  # noqa: F401 - autouse fixture
    tiny_config,
)
from trainer.data.encode import encode_corpus, val_key
from trainer.data.manifest import load_manifest, open_shard
from trainer.tokenizer import bpe
from trainer.tokenizer.model import ByteLevelBPE
from trainer.tokenizer.pretokenize import count_words
from trainer.train.loop import train
from trainer.train.sequences import ShardSequences

EOT = "<|endoftext|>"
WORDS = [
    "amber",
    "birch",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "heron",
    "iris",
    "juniper",
    "kelp",
    "lotus",
]
SENTINEL = re.compile(r"DOC(\d\d)X")
DOCS = [
    f"DOC{i:02d}X " + " ".join(WORDS[(i * 7 + k * 5) % len(WORDS)] for k in range(6 + i % 7))
    for i in range(40)
]
VAL_DOCS = 4


def sentinels(text: str) -> set[int]:
    return {int(m) for m in SENTINEL.findall(text)}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    model = bpe.train_fast(
        count_words(DOCS), vocab_size=300, min_frequency=2, special_tokens=(EOT,)
    )
    out = tmp_path_factory.mktemp("tok")
    ByteLevelBPE.from_model(model).save(out)
    return out


def val_fraction_for(count: int) -> float:
    """A val fraction between the count-th and (count+1)-th smallest document keys
    (encode's documented rule), so exactly ``count`` documents go to validation."""
    keys = sorted(val_key(hashlib.sha256(d.encode("utf-8")).digest()) for d in DOCS)
    return (keys[count - 1] + keys[count]) / 2


def split_documents(data_dir: Path, tokenizer: ByteLevelBPE) -> dict[str, list[str]]:
    """Each split's shards read back and cut at end-of-text into decoded documents."""
    manifest = load_manifest(data_dir)
    out = {}
    for split in ("train", "val"):
        stream = np.concatenate([open_shard(manifest, e) for e in manifest.shards(split)])
        assert stream[-1] == manifest.eot_id, f"{split}: the stream ends inside a document"
        cuts = np.flatnonzero(stream == manifest.eot_id)
        pieces = np.split(stream, cuts + 1)[:-1]
        out[split] = [tokenizer.decode([int(t) for t in p[:-1]]) for p in pieces]
    return out


def sequence_length_for(stream_tokens: int, global_batch: int) -> int:
    """A window length that gives a whole number of global batches per epoch and drops
    fewer tokens at the tail than the shortest document holds, so one epoch covers
    every training document (the loop itself drops an incomplete last batch)."""
    for seq_len in range(12, 40):
        sequences, tail = divmod(stream_tokens - 1, seq_len)
        if sequences % global_batch == 0 and tail <= 4:
            return seq_len
    raise AssertionError(f"no window length fits a stream of {stream_tokens} tokens")


def seen_per_epoch(rec: Recorder) -> dict[int, dict[int, torch.Tensor]]:
    """epoch -> {sequence index: the full window of seq_len + 1 tokens it trained on}."""
    epochs: dict[int, dict[int, torch.Tensor]] = {}
    for step in sorted(rec.batches):
        epoch, index_lists, micro_batches = rec.batches[step]
        for indices, (inputs, targets) in zip(index_lists, micro_batches, strict=True):
            for row, index in enumerate(indices):
                window = torch.cat([inputs[row], targets[row, -1:]])
                assert index not in epochs.setdefault(epoch, {}), (
                    f"epoch {epoch}: sequence {index} trained on twice"
                )
                epochs[epoch][index] = window
    return epochs


@pytest.mark.ship_blocking
def test_training_never_reads_a_validation_document_across_three_epochs(tmp_path, tokenizer_dir):
    tokenizer = ByteLevelBPE.load(tokenizer_dir)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    files = []
    for i, text in enumerate(DOCS):
        files.append(corpus / f"doc{i:02d}.txt")
        files[-1].write_text(text, encoding="utf-8")
    data_dir = tmp_path / "data"
    encode_corpus(
        files,
        tokenizer_dir,
        data_dir,
        shard_tokens=97,
        workers=1,
        val_fraction=val_fraction_for(VAL_DOCS),
    )

    # The split files: whole documents, each in exactly one split, 36 + 4.
    splits = split_documents(data_dir, tokenizer)
    for split, texts in splits.items():
        for text in texts:
            assert text in DOCS, f"{split} holds a piece of a document, not a whole one: {text!r}"
    train_docs = {DOCS.index(t) for t in splits["train"]}
    val_docs = {DOCS.index(t) for t in splits["val"]}
    assert len(val_docs) == VAL_DOCS and len(train_docs) == len(DOCS) - VAL_DOCS
    assert train_docs.isdisjoint(val_docs)

    # Three epochs with wrap-around, one evaluation per epoch.
    manifest = load_manifest(data_dir)
    train_tokens = manifest.data["splits"]["train"]["tokens"]
    seq_len = sequence_length_for(train_tokens, global_batch=4)
    train_data = ShardSequences(data_dir, "train", seq_len)
    val_data = ShardSequences(data_dir, "val", seq_len)
    steps_per_epoch = train_data.num_sequences // 4
    run = loop_config(
        {
            "model": tiny_config(vocab_size=manifest.vocab_size),
            "data.seq_len": seq_len,
            "training.epochs": 3,
            "training.max_steps": 3 * steps_per_epoch,
            "training.eval_interval": steps_per_epoch,
        }
    )
    rec = Recorder()
    result = train(run, train_data, val_data, hooks=rec)
    assert result.steps_run == 3 * steps_per_epoch and result.epochs_completed == 2

    epochs = seen_per_epoch(rec)
    assert sorted(epochs) == [0, 1, 2]
    for epoch, windows in epochs.items():
        for index, window in windows.items():
            text = tokenizer.decode([int(t) for t in window])
            leaked = sentinels(text) & val_docs
            assert not leaked, f"epoch {epoch}, sequence {index}: validation documents {leaked}"
        # Consecutive windows share one token: in index order they rebuild the stream read.
        ordered = [windows[i] for i in sorted(windows)]
        stream = torch.cat([ordered[0]] + [w[1:] for w in ordered[1:]])
        seen = sentinels(tokenizer.decode([int(t) for t in stream]))
        assert seen == train_docs, (
            f"epoch {epoch}: trained on documents {sorted(seen - train_docs)} that are not "
            f"training documents, missed {sorted(train_docs - seen)}"
        )

    # Every evaluation reads validation documents and nothing else.
    assert [step for step, _, _ in rec.evaluations] == [steps_per_epoch * k for k in (1, 2, 3)]
    for step, batches, _ in rec.evaluations:
        evaluated = set()
        for inputs, targets in batches:
            for row in range(inputs.shape[0]):
                window = torch.cat([inputs[row], targets[row, -1:]])
                evaluated |= sentinels(tokenizer.decode([int(t) for t in window]))
        assert evaluated and evaluated <= val_docs, (
            f"step {step}: evaluation read documents {sorted(evaluated - val_docs)}"
        )
