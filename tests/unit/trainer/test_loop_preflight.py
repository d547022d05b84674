"""FALSIFY-ARCH-370M-011 (INV-ARCH-370M-006): a run whose tokenizer has 50256 or 50258
entries, against the 370M config, is refused before the model is built - exit status 1,
both vocab sizes named, zero steps, nothing written under the run directory - and a
resume is checked like a fresh start.

The tokenizers are real byte-level BPEs of exactly 50256, 50257 and 50258 entries (the
256 bytes, <|endoftext|> and byte-pair merges) and the shards are encoded with them by
the project's own encoder, so the run sees what a user's mismatched tokenizer gives it.
A correct run refuses in milliseconds; a run that gets past the preflight is stopped by a
tripwire on the loop's model builder (not a 370M model built and trained on CPU), and the
resume cases use a tiny model, whose checkpoint is cheap to make. One test function, bound
to FALSIFY-ARCH-370M-011, holds the four cases, so the one node kills both mutants.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.tree import files_under
from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    one_thread,
    write_run_config,
)
from trainer import cli
from trainer.config.in_code import with_values
from trainer.config.load import load_config
from trainer.data.encode import encode_corpus
from trainer.data.manifest import MANIFEST_NAME
from trainer.tokenizer.model import ByteLevelBPE
from trainer.tokenizer.pretokenize import BYTE_TO_CHAR
from trainer.train import loop, preflight
from trainer.train.options import RunOptions
from trainer.train.sequences import ShardSequences

EOT = "<|endoftext|>"
VOCAB_370M = 50257  # contracts/llama-370m-sovereign-v1.yaml


def save_tokenizer(directory: Path, entries: int) -> Path:
    """A byte-level BPE of exactly ``entries`` tokens: <|endoftext|> first (as our trainer
    orders specials), the 256 bytes, then merges of byte pairs, ASCII pairs first."""
    alphabet = [BYTE_TO_CHAR[b] for b in range(256)]
    merges = tuple(itertools.islice(itertools.product(alphabet, repeat=2), entries - 257))
    vocab = (EOT, *alphabet, *(a + b for a, b in merges))
    ByteLevelBPE(vocab, merges, (EOT,)).save(directory)
    return directory


def encoded_run_data(root: Path, entries: int) -> tuple[Path, Path]:
    """(shards, tokenizer) of a small corpus encoded with an ``entries``-token tokenizer."""
    tokenizer = save_tokenizer(root / "tokenizer", entries)
    files = []
    for i in range(8):
        path = root / "corpus" / f"doc{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"story {i}: the cat sat on the mat and the dog ran. " * 12)
        files.append(path)
    encode_corpus(files, tokenizer, root / "shards", val_fraction=0.25)
    return root / "shards", tokenizer


@pytest.fixture(scope="module")
def data_of(tmp_path_factory):
    """entries -> (shards, tokenizer), built once per size."""
    made: dict[int, tuple[Path, Path]] = {}

    def get(entries: int) -> tuple[Path, Path]:
        if entries not in made:
            made[entries] = encoded_run_data(tmp_path_factory.mktemp(f"v{entries}"), entries)
        return made[entries]

    return get


def write_370m_config(path: Path, shards: Path, tokenizer: Path, out: Path) -> Path:
    """The 370M preset on CPU, one step of one 16-token sequence, evaluated and saved."""
    lines = [
        "name: vocab-preflight-370m",
        "model:",
        "  preset: 370m",
        "data:",
        f"  shards: {shards}",
        f"  tokenizer: {tokenizer}",
        "  micro_batch: 1",
        "  seq_len: 16",
        "optimizer:",
        "  name: adamw",
        "  lr: 3.0e-4",
        "training:",
        "  epochs: 1",
        "  max_steps: 1",
        "  warmup_steps: 0",
        "  eval_interval: 1",
        "  save_interval: 1",
        f"  output_dir: {out}",
        "  force_token_budget: true",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class _ModelBuilt(Exception):  # noqa: N818 - a signal, not an error of the code
    """Raised by the tripwire on the loop's model builder: the run got past every check."""


def trip_the_model_builder(monkeypatch) -> list[int]:
    """Replace the loop's model builder with a tripwire; returns the vocab sizes it was
    asked to build. A refused run never calls it; one that is not refused stops there
    instead of spending seconds and gigabytes on a 370M model on CPU."""
    built: list[int] = []

    def tripwire(cfg, **kwargs):
        built.append(cfg.vocab_size)
        raise _ModelBuilt

    monkeypatch.setattr(loop, "build_model", tripwire)
    return built


def _refused_370m_run(entries, data_of, tmp_path, capsys, monkeypatch) -> None:
    """The 370M config with an ``entries``-token tokenizer and its shards: the loop called
    as a library, then `trainer apply`; each refuses before the model is built."""
    shards, tokenizer = data_of(entries)
    run = tmp_path / "run"
    config = write_370m_config(tmp_path / "run.yaml", shards, tokenizer, run)
    built = trip_the_model_builder(monkeypatch)

    cfg = load_config(config)
    assert cfg.model.vocab_size == VOCAB_370M
    options = RunOptions(device="cpu", out_dir=cfg.training.output_dir, checkpoint=True)
    assert options.checkpoint_dir == run / "checkpoints"
    train_data = ShardSequences(shards, "train", cfg.data.seq_len)
    val_data = ShardSequences(shards, "val", cfg.data.seq_len)
    with pytest.raises((preflight.PreflightError, _ModelBuilt)) as raised:
        loop.train(cfg, train_data, val_data, options=options)
    assert built == [], f"loop.train built the {VOCAB_370M}-entry model for {entries} tokens"
    assert raised.type is preflight.PreflightError
    message = str(raised.value)
    assert f"vocab_size {VOCAB_370M} != {entries}" in message, message
    assert str(tokenizer / "tokenizer.json") in message, message
    assert str(shards / MANIFEST_NAME) in message, message
    assert "nothing trained or written" in message
    assert files_under(run) == {} and not run.exists(), "the refused run wrote files"

    try:
        rc = cli.main(["apply", str(config), "--out", str(run), "--device", "cpu"])
    except _ModelBuilt:
        rc = None
    err = capsys.readouterr().err
    assert built == [], f"trainer apply built the {VOCAB_370M}-entry model for {entries} tokens"
    assert files_under(run) == {} and not run.exists(), sorted(files_under(run))
    assert rc == 1, err
    assert f"vocab_size {VOCAB_370M} != {entries}" in err, err
    assert str(tokenizer / "tokenizer.json") in err and "Traceback" not in err, err


def _stopped_tiny_run(data_of, tmp_path) -> tuple[Path, Path, Path]:
    """(config, run dir, tokenizer): a tiny model on 512-entry data, stopped at step 4 with
    checkpoints at steps 2 and 4."""
    shards, tokenizer = data_of(512)
    # The tokenizer is copied next to the run, so the test can retrain it "in place".
    own = save_tokenizer(tmp_path / "tokenizer", 512)
    assert (own / "tokenizer.json").read_bytes() == (tokenizer / "tokenizer.json").read_bytes()
    config = write_run_config(
        tmp_path / "run.yaml", shards, own, tmp_path / "unused", max_steps=20, save_interval=2
    )
    run = tmp_path / "run"
    args = ["apply", str(config), "--out", str(run), "--device", "cpu", "--stop-after", "4"]
    assert cli.main(args) == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir()) == [
        "step-00000002",
        "step-00000004",
    ]
    return config, run, own


def _refused_resume(resume, data_of, tmp_path, capsys) -> None:
    """A run stopped at step 4 whose tokenizer was then retrained in place with one more
    entry: `trainer apply --resume` is refused like a fresh start, and nothing changes."""
    config, run, tokenizer = _stopped_tiny_run(data_of, tmp_path)
    save_tokenizer(tokenizer, 513)
    before = files_under(run)
    capsys.readouterr()
    spec = "latest" if resume == "latest" else str(run / "checkpoints" / resume)

    rc = cli.main(["apply", str(config), "--out", str(run), "--device", "cpu", "--resume", spec])

    out, err = capsys.readouterr()
    after = files_under(run)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, (
        f"the resume with a 513-entry tokenizer trained or wrote ({out.strip()}): {changed}"
    )
    assert rc == 1, err
    assert "vocab_size 512 != 513" in err and str(tokenizer / "tokenizer.json") in err, err


@pytest.mark.ship_blocking
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(("370m", 50256), id="370m-tokenizer-50256"),
        pytest.param(("370m", 50258), id="370m-tokenizer-50258"),
        pytest.param(("resume", "latest"), id="resume-latest"),
        pytest.param(("resume", "step-00000004"), id="resume-named-checkpoint"),
    ],
)
def test_arch_370m_011_a_run_of_another_vocabulary_is_refused_before_its_first_step(
    case, data_of, tmp_path, capsys, monkeypatch
):
    kind, value = case
    if kind == "370m":
        _refused_370m_run(value, data_of, tmp_path, capsys, monkeypatch)
    else:
        _refused_resume(value, data_of, tmp_path, capsys)


def test_the_370m_run_with_its_own_50257_tokenizer_passes_the_preflight(data_of, tmp_path):
    # The control: a check that refuses everything is no check.
    shards, tokenizer = data_of(VOCAB_370M)
    config = load_config(write_370m_config(tmp_path / "run.yaml", shards, tokenizer, tmp_path))
    train_data = ShardSequences(shards, "train", config.data.seq_len)
    checked = preflight.check_run(config, RunOptions(), train_data, None)
    assert sorted(v.size for v in checked) == [VOCAB_370M, VOCAB_370M]
    assert {v.source.split()[0] for v in checked} == {"tokenizer", "shards"}


# ---------------------------------------------------------------- the other refusals
def test_a_tokenizer_of_the_right_size_that_did_not_encode_the_shards_is_refused(data_of, tmp_path):
    shards, _ = data_of(512)
    other = save_tokenizer(tmp_path / "other", 512)
    # The same 512 tokens, saved again with a trailing newline: other bytes, other sha256,
    # as any tokenizer the shards were not encoded with has.
    text = (other / "tokenizer.json").read_text(encoding="utf-8")
    (other / "tokenizer.json").write_text(text + "\n", encoding="utf-8")
    config = write_run_config(tmp_path / "run.yaml", shards, other, tmp_path / "o")
    cfg = load_config(config)
    with pytest.raises(preflight.PreflightError) as refused:
        preflight.check_run(cfg, RunOptions(), ShardSequences(shards, "train", cfg.data.seq_len))
    message = str(refused.value)
    assert "is not the tokenizer the shards" in message and str(shards / MANIFEST_NAME) in message


def test_a_named_tokenizer_that_is_missing_is_refused_naming_it(data_of, tmp_path):
    shards, tokenizer = data_of(512)
    config = write_run_config(tmp_path / "run.yaml", shards, tokenizer, tmp_path / "o")
    cfg = with_values(load_config(config), {"data.tokenizer": tmp_path / "gone"})
    with pytest.raises(preflight.PreflightError) as refused:
        preflight.check_run(cfg, RunOptions(), None)
    message = str(refused.value)
    assert f"{tmp_path / 'gone'}: No such file" in message and "cannot be checked" in message


def test_every_disagreeing_vocabulary_is_named_in_one_refusal(data_of, tmp_path):
    shards, _ = data_of(50258)
    _, tokenizer = data_of(50256)
    config = write_370m_config(tmp_path / "run.yaml", shards, tokenizer, tmp_path / "out")
    cfg = load_config(config)
    with pytest.raises(preflight.PreflightError) as refused:
        preflight.check_run(cfg, RunOptions(), ShardSequences(shards, "train", cfg.data.seq_len))
    message = str(refused.value)
    assert f"vocab_size {VOCAB_370M} != 50256 of tokenizer {tokenizer}" in message, message
    assert f"vocab_size {VOCAB_370M} != 50258 of shards {shards}" in message, message
    assert "ids 50257..50257 would index past the embedding" in message
    assert "disagree among themselves too (50256, 50258)" in message


def test_a_named_checkpoint_of_another_vocabulary_is_refused_by_the_preflight(data_of, tmp_path):
    _, run, _ = _stopped_tiny_run(data_of, tmp_path / "old")
    shards, tokenizer = data_of(513)
    config = write_run_config(tmp_path / "run.yaml", shards, tokenizer, tmp_path / "o")
    checkpoint = run / "checkpoints" / "step-00000004"
    cfg = load_config(config)
    options = RunOptions(out_dir=run, resume_from=checkpoint, resume_override=True)
    with pytest.raises(preflight.PreflightError) as refused:
        preflight.check_run(cfg, options, ShardSequences(shards, "train", cfg.data.seq_len))
    message = str(refused.value)
    assert f"vocab_size 513 != 512 of checkpoint {checkpoint / 'manifest.json'}" in message
