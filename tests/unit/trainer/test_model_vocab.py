"""Model/tokenizer vocabulary agreement (issue #5, INV-ARCH-370M-006): the size read from
our tokenizer files, gaps named by id, malformed files named by path, and mismatches
refused with both numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.model import VocabMismatchError, check_vocab_agreement, tokenizer_vocab_size
from trainer.tokenizer import bpe
from trainer.tokenizer.model import ByteLevelBPE, TokenizerFileError
from trainer.tokenizer.pretokenize import count_words

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def trained_tokenizer(tmp_path_factory) -> tuple[Path, int]:
    text = ["def f(x):\n    return x + 1\n", "class A:\n    pass\n"] * 20
    model = bpe.train_fast(
        count_words(text), vocab_size=300, min_frequency=2, special_tokens=(EOT,)
    )
    out = tmp_path_factory.mktemp("tok")
    ByteLevelBPE.from_model(model).save(out)
    return out, ByteLevelBPE.load(out).vocab_size


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_the_size_of_our_tokenizer_is_its_vocab_read_from_dir_or_file(trained_tokenizer):
    directory, size = trained_tokenizer
    assert tokenizer_vocab_size(directory) == size
    assert tokenizer_vocab_size(directory / "tokenizer.json") == size
    assert tokenizer_vocab_size(str(directory)) == size


def test_an_added_token_outside_model_vocab_counts_when_it_continues_the_ids(tmp_path):
    data = {
        "model": {"vocab": {"a": 0, "b": 1}},
        "added_tokens": [{"id": 2, "content": EOT}, {"id": 1, "content": "b"}],
    }
    assert tokenizer_vocab_size(write_json(tmp_path / "tokenizer.json", data)) == 3


def test_a_gap_in_the_ids_names_the_missing_id(tmp_path):
    data = {"model": {"vocab": {"a": 0, "b": 1, "d": 3, "e": 4}}}
    with pytest.raises(TokenizerFileError) as refused:
        tokenizer_vocab_size(write_json(tmp_path / "tokenizer.json", data))
    message = str(refused.value)
    assert "id 2 is missing" in message and "highest 4" in message
    assert str(tmp_path / "tokenizer.json") in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "No such file"),
        ("{not json", "not JSON"),
        ([1, 2], "model.vocab is missing"),
        ({"model": {"vocab": {}}}, "model.vocab is missing or empty"),
        ({"model": "BPE"}, "model.vocab is missing"),
        ({"model": {"vocab": {"a": -1}}}, "id -1 of 'a' is not an id >= 0"),
        ({"model": {"vocab": {"a": "0"}}}, "id '0' of 'a'"),
        ({"model": {"vocab": {"a": 0}}, "added_tokens": {"x": 1}}, "added_tokens is not a list"),
        (
            {"model": {"vocab": {"a": 0}}, "added_tokens": [{"content": "x"}]},
            "added_tokens id None",
        ),
    ],
)
def test_a_malformed_tokenizer_file_is_named_not_crashed_on(tmp_path, content, expected):
    path = tmp_path / "tokenizer.json"
    if isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        write_json(path, content)
    with pytest.raises(TokenizerFileError) as refused:
        tokenizer_vocab_size(path)
    assert expected in str(refused.value) and str(path) in str(refused.value)


def test_equal_sizes_are_accepted():
    check_vocab_agreement(50257, 50257)


@pytest.mark.parametrize(
    ("model", "tokenizer", "why"),
    [
        (50256, 50257, "ids 50256..50256 would index past the embedding"),
        (50304, 50257, "47 embedding rows no token can reach"),
        (8192, 8193, "ids 8192..8192"),
    ],
)
def test_a_mismatch_is_refused_with_both_numbers_and_the_fix(model, tokenizer, why):
    with pytest.raises(VocabMismatchError) as refused:
        check_vocab_agreement(model, tokenizer, tokenizer_path="runs/demo/tokenizer")
    message = str(refused.value)
    assert f"model vocab_size {model} != tokenizer vocab size {tokenizer}" in message
    assert "(runs/demo/tokenizer)" in message and why in message
    assert f"set the model's vocab_size to {tokenizer}" in message
    assert (refused.value.model_vocab_size, refused.value.tokenizer_vocab_size) == (
        model,
        tokenizer,
    )
