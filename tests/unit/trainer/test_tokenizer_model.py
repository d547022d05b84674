"""Encoding, files and the CLI: HF loads what we write and encodes as we do; decode inverts
encode for any text; counting on two cores equals one; bad input is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from trainer import cli
from trainer.tokenizer import bpe, counting
from trainer.tokenizer.model import ByteLevelBPE, TokenizerFileError
from trainer.tokenizer.pretokenize import count_words

CORPUS = [
    "def f(x):\n    return x + 1  # café\n",
    "class Ünïcode:\n    '''日本語 docstring'''\n    pass\r\n",
    "print('hello world') <|endoftext|> print(\"hello again\")\n\n\t  \n",
] * 20


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[ByteLevelBPE, Tokenizer, Path]:
    tok = ByteLevelBPE.from_model(
        bpe.train_fast(count_words(CORPUS), vocab_size=400, min_frequency=2)
    )
    out = tmp_path_factory.mktemp("tok")
    tok.save(out)
    return tok, Tokenizer.from_file(str(out / "tokenizer.json")), out


@given(st.text(max_size=200))
@settings(max_examples=200)
def test_decode_inverts_encode_for_any_text(trained, text):
    tok, _, _ = trained
    assert tok.decode(tok.encode(text)) == text


@given(
    st.lists(st.sampled_from([*"ab cé日\n\r\t'1", "<|endoftext|>", "def", "<|"]), max_size=60).map(
        "".join
    )
)
@settings(max_examples=200)
def test_hf_encodes_our_tokenizer_json_exactly_as_we_do(trained, text):
    tok, hf, _ = trained
    assert tok.encode(text) == hf.encode(text).ids


def test_load_returns_the_saved_tokenizer(trained):
    tok, _, out = trained
    back = ByteLevelBPE.load(out)
    assert (back.vocab, back.merges, back.special_tokens) == (
        tok.vocab,
        tok.merges,
        tok.special_tokens,
    )
    merges = (out / "merges.txt").read_text().splitlines()
    assert merges[0] == "#version: 0.2" and len(merges) == len(tok.merges) + 1
    assert json.loads((out / "vocab.json").read_text())["<|endoftext|>"] == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a BPE tokenizer.json"),
        ('{"model": {"type": "WordPiece"}}', "not BPE"),
        ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "b"]]}}', "merge 0"),
    ],
)
def test_a_bad_tokenizer_json_names_the_file(tmp_path, content, message):
    (tmp_path / "tokenizer.json").write_text(content)
    with pytest.raises(TokenizerFileError, match=message) as err:
        ByteLevelBPE.load(tmp_path)
    assert str(tmp_path / "tokenizer.json") in str(err.value)


def test_two_processes_count_exactly_as_one_including_order(tmp_path, monkeypatch):
    files = []
    for i in range(12):
        path = tmp_path / f"f{i:02d}.py"
        path.write_text(f"x{i} = {i} * {i}\n" + CORPUS[i % 3] * (i + 1))
        files.append(path)
    monkeypatch.setattr(counting, "PARALLEL_MIN_BYTES", 0)
    one = counting.count_files(files, workers=1)
    two = counting.count_files(files, workers=2)
    assert list(one.items()) == list(two.items())


def test_cli_trains_writes_files_and_reports_progress(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("".join(f"word{i} other{i * 3} x{i % 7}\n" for i in range(3000)))
    out = tmp_path / "tok"
    assert (
        cli.main(
            [
                "tokenizer",
                "train",
                "--input",
                str(src),
                "--vocab-size",
                "1400",
                "--min-frequency",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("[bpe] merges=")]
    assert len(lines) == 1  # 1131 merges: one line per full thousand
    assert "top_count=" in lines[0] and "heap=" in lines[0] and "elapsed=" in lines[0]
    assert err.index("[bpe-setup]") < err.index("[bpe] merges=") < err.index("[bpe] DONE")
    assert Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size() == 1400


@pytest.mark.parametrize(
    ("setup", "argv", "message"),
    [
        (lambda d: (d / "a.txt").write_text("abc\n"), ["--vocab-size", "10"], "--vocab-size"),
        (lambda d: None, ["--vocab-size", "400"], "no input files"),
        (lambda d: (d / "b.txt").write_bytes(b"ok\n\xff\xfe\n"), ["--vocab-size", "400"], "b.txt"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_1(tmp_path, capsys, setup, argv, message):
    src = tmp_path / "src"
    src.mkdir()
    setup(src)
    rc = cli.main(["tokenizer", "train", "--input", str(src), "--out", str(tmp_path / "o"), *argv])
    err = capsys.readouterr().err
    assert rc == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "o" / "tokenizer.json").exists()
