"""Corpus shards (issue #4): the shard format round-trips and rejects every kind of damage
by name; encode puts each document in exactly one split, identically on one or two cores,
and never leaves a half-written directory; the training sequences the loop reads are
windows of the stream, exactly, and a split's source never shows another split's document."""

from __future__ import annotations

import hashlib
import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer import cli
from trainer.data import encode
from trainer.data.encode import CorpusEncodeError, assign_val, encode_corpus
from trainer.data.manifest import load_manifest
from trainer.data.shards import HEADER_SIZE, ShardError, read_shard, write_shard
from trainer.tokenizer import bpe
from trainer.tokenizer.corpus import EmbeddedCorpus
from trainer.tokenizer.model import ByteLevelBPE, TokenizerFileError
from trainer.tokenizer.pretokenize import count_words
from trainer.train.sequences import ShardSequences

EOT = "<|endoftext|>"
# Each document carries a marker no other document contains, so a decoded stream tells
# which documents it holds.
DOCS = [
    f"# MARK{i:03d}Q\ndef f{i}(x):\n    return x * {i} + len('café{i}')\n" + "pass\n" * (i % 4)
    for i in range(40)
]


def marker(i: int) -> str:
    return f"MARK{i:03d}Q"


def write_corpus(directory: Path, texts: list[str]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, text in enumerate(texts):
        path = directory / f"doc{i:03d}.py"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    model = bpe.train_fast(
        count_words(DOCS), vocab_size=400, min_frequency=2, special_tokens=(EOT,)
    )
    out = tmp_path_factory.mktemp("tok")
    ByteLevelBPE.from_model(model).save(out)
    return out


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir) -> ByteLevelBPE:
    return ByteLevelBPE.load(tokenizer_dir)


@pytest.fixture(scope="module")
def encoded(tmp_path_factory, tokenizer_dir) -> tuple[Path, list[Path]]:
    """DOCS encoded with ~25% val and small shards, so streams cross shard boundaries."""
    root = tmp_path_factory.mktemp("encoded")
    files = write_corpus(root / "corpus", DOCS)
    encode_corpus(files, tokenizer_dir, root / "data", shard_tokens=97, val_fraction=0.25)
    return root / "data", files


def split_stream(data_dir: Path, split: str) -> np.ndarray:
    manifest = load_manifest(data_dir)
    return np.concatenate(
        [np.asarray(read_shard(data_dir / s.file)) for s in manifest.shards(split)]
    )


def split_documents(data_dir: Path, split: str, tokenizer: ByteLevelBPE) -> list[str]:
    stream = split_stream(data_dir, split).tolist()
    eot = tokenizer.token_to_id(EOT)
    assert stream[-1] == eot, "every document, the last included, ends with <|endoftext|>"
    docs, current = [], []
    for token in stream:
        if token == eot:
            docs.append(tokenizer.decode(current))
            current = []
        else:
            current.append(token)
    return docs


# ---------------------------------------------------------------- shard format
@given(
    vocab_size=st.sampled_from([1, 2, 255, 65535, 65536, 65537, 1 << 20, (1 << 32) - 1]),
    data=st.data(),
)
@settings(max_examples=60, deadline=None)
def test_shard_round_trip_keeps_every_id_and_picks_the_narrowest_dtype(vocab_size, data):
    tokens = np.array(
        data.draw(st.lists(st.integers(0, vocab_size - 1), max_size=300)), dtype=np.int64
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.bin"
        write_shard(path, tokens, vocab_size)
        back = read_shard(path, expected_vocab_size=vocab_size)
        assert back.dtype == (np.uint16 if vocab_size <= 65536 else np.uint32)
        assert np.array_equal(np.asarray(back, dtype=np.int64), tokens)
        assert path.stat().st_size == HEADER_SIZE + len(tokens) * back.dtype.itemsize
        del back  # release the memmap before the directory goes


def _patch(path: Path, offset: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset : offset + len(data)] = data
    path.write_bytes(bytes(raw))


DAMAGES = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:-3]), "truncated"),
    "trailing bytes": (lambda p: p.write_bytes(p.read_bytes() + b"\0\0"), "trailing bytes"),
    "truncated header": (lambda p: p.write_bytes(p.read_bytes()[:20]), "truncated header"),
    "bad magic": (lambda p: _patch(p, 0, b"NOTTOKEN"), "bad magic"),
    "unknown version": (lambda p: _patch(p, 8, struct.pack("<I", 7)), "version 7"),
    "unknown dtype code": (lambda p: _patch(p, 12, struct.pack("<I", 9)), "dtype code 9"),
    "wrong dtype code": (lambda p: _patch(p, 12, struct.pack("<I", 2)), "disagrees"),
    "token id >= vocab": (lambda p: _patch(p, 16, struct.pack("<I", 500)), ">= vocab_size 500"),
    "reserved bytes set": (lambda p: _patch(p, 40, b"\1"), "reserved"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_read_shard_names_the_file_and_the_damage(tmp_path, damage):
    path = tmp_path / "train-00001.bin"
    write_shard(path, np.arange(0, 1000, 7), vocab_size=1000)  # ids up to 994
    apply, expected = DAMAGES[damage]
    apply(path)
    with pytest.raises(ShardError, match=expected) as info:
        read_shard(path)
    assert "train-00001.bin" in str(info.value)


def test_truncation_message_gives_both_sizes(tmp_path):
    path = tmp_path / "train-00001.bin"
    write_shard(path, np.zeros(1000, dtype=np.int64), vocab_size=1000)
    path.write_bytes(path.read_bytes()[:1500])
    with pytest.raises(ShardError) as info:
        read_shard(path)
    assert str(info.value) == (
        f"shard {path}: truncated: header says 1000 tokens (2064 bytes), file has 1500 bytes"
    )


def test_read_shard_refuses_a_shard_for_another_vocab_or_dtype(tmp_path):
    path = tmp_path / "s.bin"
    write_shard(path, np.arange(10), vocab_size=300)
    with pytest.raises(ShardError, match="expected 301"):
        read_shard(path, expected_vocab_size=301)
    with pytest.raises(ShardError, match="expected uint32"):
        read_shard(path, expected_dtype="uint32")


def test_write_shard_refuses_ids_outside_the_vocab_and_leaves_no_file(tmp_path):
    with pytest.raises(ValueError, match=r"outside 0\.\.9"):
        write_shard(tmp_path / "s.bin", np.array([3, 10]), vocab_size=10)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- encode
def test_shards_decode_back_to_the_documents_each_in_exactly_one_split(encoded, tokenizer):
    data_dir, _ = encoded
    train = split_documents(data_dir, "train", tokenizer)
    val = split_documents(data_dir, "val", tokenizer)
    assert train and val
    assert sorted(train + val) == sorted(DOCS)  # every document once, in one split only
    assert not set(train) & set(val)
    # Within a split, documents keep file order.
    assert train == [d for d in DOCS if d in set(train)]
    manifest = load_manifest(data_dir).data
    assert manifest["splits"]["train"]["documents"] == len(train)
    assert manifest["splits"]["val"]["documents"] == len(val)
    assert len(manifest["splits"]["train"]["shards"]) > 1


def test_manifest_records_tokenizer_sources_and_totals(encoded, tokenizer_dir, tokenizer):
    data_dir, files = encoded
    data = json.loads((data_dir / "manifest.json").read_text())
    assert data["tokenizer"]["vocab_size"] == tokenizer.vocab_size
    assert data["tokenizer"]["eot_id"] == tokenizer.token_to_id(EOT)
    assert data["dtype"] == "uint16"
    assert data["sources"] == {"files": len(files), "skipped": 0, "empty_documents": 0}
    assert data["totals"]["tokens"] == sum(len(split_stream(data_dir, s)) for s in ("train", "val"))
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(
        ["manifest.json"]
        + [s["file"] for split in ("train", "val") for s in data["splits"][split]["shards"]]
    )


def test_encode_is_identical_on_one_and_two_workers(tmp_path, tokenizer_dir, monkeypatch):
    monkeypatch.setattr(encode, "PARALLEL_MIN_BYTES", 0)  # fork even for a tiny corpus
    files = write_corpus(tmp_path / "corpus", DOCS)
    for workers in (1, 2):
        encode_corpus(
            files, tokenizer_dir, tmp_path / f"w{workers}", shard_tokens=50, val_fraction=0.3,
            workers=workers,
        )  # fmt: skip
    one, two = sorted((tmp_path / "w1").iterdir()), sorted((tmp_path / "w2").iterdir())
    assert [p.name for p in one] == [p.name for p in two]
    for a, b in zip(one, two, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_a_literal_endoftext_in_a_file_stays_text(tmp_path, tokenizer_dir, tokenizer):
    texts = [f"s = '{EOT}'  # MARKERA\n", "x = 1\n", "y = 2\n"]
    encode_corpus(write_corpus(tmp_path / "c", texts), tokenizer_dir, tmp_path / "d")
    docs = split_documents(tmp_path / "d", "train", tokenizer)
    docs += split_documents(tmp_path / "d", "val", tokenizer)
    assert sorted(docs) == sorted(texts)


def test_empty_files_are_counted_and_left_out(tmp_path, tokenizer_dir):
    manifest = encode_corpus(
        write_corpus(tmp_path / "c", ["", "a = 1\n", "", "b = 2\n"]),
        tokenizer_dir,
        tmp_path / "d",
    )
    assert manifest["sources"]["empty_documents"] == 2
    assert manifest["totals"]["documents"] == 2


@given(
    contents=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=30),
    val_fraction=st.floats(0.001, 0.999),
)
@settings(max_examples=100, deadline=None)
def test_val_split_keeps_copies_together_and_both_splits_non_empty(contents, val_fraction):
    digests = [c.encode() * 32 for c in contents]  # stand-ins: equal content, equal digest
    if len(set(contents)) < 2:
        with pytest.raises(CorpusEncodeError, match="2 distinct"):
            assign_val(digests, val_fraction)
        return
    is_val = assign_val(digests, val_fraction)
    assert any(is_val) and not all(is_val)
    for c in set(contents):
        assert len({v for v, d in zip(is_val, contents, strict=True) if d == c}) == 1


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        ([], "no input files"),
        (["", "", ""], "all 3 input files are empty"),
        (["only = 1\n"], "at least 2 distinct"),
        (["same\n", "same\n"], "at least 2 distinct"),
    ],
)
def test_a_corpus_too_small_to_split_is_a_clear_error(tmp_path, tokenizer_dir, texts, expected):
    files = write_corpus(tmp_path / "c", texts)
    with pytest.raises(CorpusEncodeError, match=expected):
        encode_corpus(files, tokenizer_dir, tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_a_tokenizer_without_endoftext_is_refused(tmp_path):
    model = bpe.train_fast(count_words(DOCS), vocab_size=300, special_tokens=())
    ByteLevelBPE.from_model(model).save(tmp_path / "tok")
    files = write_corpus(tmp_path / "c", DOCS[:3])
    with pytest.raises(TokenizerFileError, match=r"tokenizer\.json: no <\|endoftext\|>"):
        encode_corpus(files, tmp_path / "tok", tmp_path / "d")


def test_an_unreadable_file_is_named(tmp_path, tokenizer_dir):
    files = write_corpus(tmp_path / "c", DOCS[:3])
    files[1].write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ValueError, match=r"doc001\.py: not UTF-8"):
        encode_corpus(files, tokenizer_dir, tmp_path / "d")


def test_a_non_empty_out_dir_is_refused_untouched_unless_forced(tmp_path, tokenizer_dir):
    files = write_corpus(tmp_path / "c", DOCS[:5])
    out = tmp_path / "d"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(CorpusEncodeError, match="exists and is not empty"):
        encode_corpus(files, tokenizer_dir, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    encode_corpus(files, tokenizer_dir, out, force=True)
    assert not (out / "keep.txt").exists()
    load_manifest(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "d"]  # no temp or old dirs


def test_an_empty_out_dir_is_filled_in_place(tmp_path, tokenizer_dir):
    (tmp_path / "d").mkdir()
    encode_corpus(write_corpus(tmp_path / "c", DOCS[:5]), tokenizer_dir, tmp_path / "d")
    load_manifest(tmp_path / "d")


@pytest.mark.parametrize("existing", [False, True])
def test_a_failed_encode_leaves_nothing_half_written(
    tmp_path, tokenizer_dir, monkeypatch, existing
):
    files = write_corpus(tmp_path / "c", DOCS)
    out = tmp_path / "d"
    if existing:
        encode_corpus(files[:5], tokenizer_dir, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()} if existing else None
    calls = []

    def failing_write_shard(path, tokens, vocab_size):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        write_shard(path, tokens, vocab_size)

    monkeypatch.setattr(encode, "write_shard", failing_write_shard)
    try:
        encode_corpus(files, tokenizer_dir, out, shard_tokens=50, force=True)
    except CorpusEncodeError as exc:  # the file named: a message, not a traceback
        said = str(exc)
    except OSError as exc:
        said = f"not a CorpusEncodeError: {exc!r}"
    else:
        said = "no error"
    assert "train-00001.bin: cannot be written: No space left on device" in said, said
    assert len(calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == (["c", "d"] if existing else ["c"])
    if existing:
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ---------------------------------------------------------------- manifest verification
def _copy(data_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    out.mkdir()
    for p in data_dir.iterdir():
        (out / p.name).write_bytes(p.read_bytes())
    return out


def _edit_manifest(data_dir: Path, edit) -> None:
    path = data_dir / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("field", "delete"),
    [
        ("tokenizer.vocab_size", lambda d: d["tokenizer"].pop("vocab_size")),
        ("splits.val", lambda d: d["splits"].pop("val")),
        ("splits.train.shards.0.sha256", lambda d: d["splits"]["train"]["shards"][0].pop("sha256")),
        ("totals", lambda d: d.pop("totals")),
    ],
)
def test_a_manifest_missing_a_field_names_manifest_json_and_the_field(
    encoded, tmp_path, field, delete
):
    data_dir = _copy(encoded[0], tmp_path)
    _edit_manifest(data_dir, delete)
    with pytest.raises(ShardError, match=rf"manifest\.json: missing field {field}"):
        load_manifest(data_dir, verify=False)


def test_one_flipped_byte_in_a_shard_is_a_hash_mismatch_naming_the_shard(encoded, tmp_path):
    data_dir = _copy(encoded[0], tmp_path)
    shard = data_dir / "train-00001.bin"
    raw = bytearray(shard.read_bytes())
    raw[HEADER_SIZE + 3] ^= 0x01
    shard.write_bytes(bytes(raw))
    with pytest.raises(ShardError, match=r"train-00001\.bin: sha256 mismatch"):
        load_manifest(data_dir)
    load_manifest(data_dir, splits=("val",))  # the other split still verifies


def test_a_shard_whose_header_disagrees_with_the_manifest_is_named(encoded, tmp_path):
    data_dir = _copy(encoded[0], tmp_path)
    shard = data_dir / "val-00000.bin"
    _patch(shard, 16, struct.pack("<I", 60000))  # another vocab, same dtype
    digest = hashlib.sha256(shard.read_bytes()).hexdigest()
    _edit_manifest(data_dir, lambda d: d["splits"]["val"]["shards"][0].update(sha256=digest))
    with pytest.raises(ShardError, match=r"val-00000\.bin: vocab_size 60000 in the header"):
        load_manifest(data_dir)


def test_a_missing_manifest_is_named(tmp_path):
    with pytest.raises(ShardError, match=r"manifest\.json: cannot read"):
        load_manifest(tmp_path)


# ---------------------------------------------------------------- training sequences
# What the loop reads: trainer/train/sequences.py ShardSequences. Which sequences a step
# takes, wrap-around and exhaustion are trainer/train/steps.py's and the loop's
# (test_config_steps.py, test_loop_run.py, test_loop_data.py).
def test_sequences_are_windows_of_the_stream_with_targets_shifted_by_one(encoded):
    data_dir, _ = encoded
    stream = torch.from_numpy(split_stream(data_dir, "train").astype(np.int64))
    source = ShardSequences(data_dir, "train", seq_len=16)
    assert source.stream_tokens == len(stream)
    assert source.num_sequences == (len(stream) - 1) // 16
    inputs, targets = source.batch(range(source.num_sequences))
    assert inputs.shape == targets.shape == (source.num_sequences, 16)
    assert inputs.dtype == targets.dtype == torch.int64
    for i in range(source.num_sequences):
        assert torch.equal(inputs[i], stream[i * 16 : i * 16 + 16])
        assert torch.equal(targets[i], stream[i * 16 + 1 : i * 16 + 17])
    # Every token up to the dropped tail (shorter than one window) is an input once.
    assert torch.equal(inputs.flatten(), stream[: source.num_sequences * 16])
    assert len(stream) - source.num_sequences * 16 <= 16
    with pytest.raises(IndexError, match=r"sequence \d+ is outside"):
        source.window(source.num_sequences)


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_split_source_reads_only_its_own_documents(encoded, tokenizer, split):
    data_dir, _ = encoded
    val_docs = split_documents(data_dir, "val", tokenizer)
    in_val = {i for i, d in enumerate(DOCS) if d in val_docs}
    mine = in_val if split == "val" else set(range(len(DOCS))) - in_val
    assert in_val and mine != set(range(len(DOCS)))
    source = ShardSequences(data_dir, split, seq_len=8)
    inputs, targets = source.batch(range(source.num_sequences))
    text = tokenizer.decode([*inputs.flatten().tolist(), int(targets[-1, -1])])
    assert not [i for i in range(len(DOCS)) if i not in mine and marker(i) in text]
    assert len([i for i in mine if marker(i) in text]) >= len(mine) - 1  # the tail's


# ---------------------------------------------------------------- CLI
def test_cli_encodes_and_inspects(tmp_path, tokenizer_dir, capsys):
    write_corpus(tmp_path / "corpus", DOCS)
    out = tmp_path / "data"
    argv = [
        "data",
        "encode",
        "--tokenizer",
        str(tokenizer_dir),
        "--input",
        str(tmp_path / "corpus"),
    ]
    assert cli.main([*argv, "--out", str(out), "--val-fraction", "0.2", "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out / "manifest.json")
    assert "[data] encoded 40/40 files" in captured.err
    assert cli.main(["data", "inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verified" in text and "train: 1 shards" in text and "train-00000.bin" in text
    assert cli.main(["data", "inspect", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified"] and report["totals"]["documents"] == len(DOCS)


def test_cli_without_input_encodes_the_embedded_corpus(
    tmp_path, tokenizer_dir, capsys, monkeypatch
):
    files = write_corpus(tmp_path / "corpus", DOCS[:4])
    fake = EmbeddedCorpus(tuple(files), (tmp_path / "bad.py",))
    monkeypatch.setattr(encode, "embedded_corpus", lambda site_packages: fake)
    out = tmp_path / "data"
    assert cli.main(["data", "encode", "--tokenizer", str(tokenizer_dir), "--out", str(out)]) == 0
    assert "[data] embedded corpus: standard library, 4 files (1 undecodable skipped)" in (
        capsys.readouterr().err
    )
    assert load_manifest(out).data["sources"]["skipped"] == 1


@pytest.mark.parametrize("problem", ["out exists", "no such input", "no eot"])
def test_cli_encode_errors_exit_1_with_the_cause(tmp_path, tokenizer_dir, capsys, problem):
    write_corpus(tmp_path / "corpus", DOCS[:4])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    tok, inp, out = tokenizer_dir, tmp_path / "corpus", tmp_path / "out"
    if problem == "no such input":
        inp, out = tmp_path / "missing", tmp_path / "new"
    if problem == "no eot":
        out, tok = tmp_path / "new", tmp_path / "tok"
        ByteLevelBPE.from_model(
            bpe.train_fast(count_words(DOCS), vocab_size=300, special_tokens=())
        ).save(tok)
    argv = ["data", "encode", "--tokenizer", str(tok), "--input", str(inp), "--out", str(out)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("trainer data encode: error: ")
    assert {"out exists": "out", "no such input": "missing", "no eot": "tokenizer.json"}[
        problem
    ] in err


def test_cli_inspect_of_a_corrupt_shard_exits_1_naming_it(encoded, tmp_path, capsys):
    data_dir = _copy(encoded[0], tmp_path)
    shard = data_dir / "val-00000.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    assert cli.main(["data", "inspect", str(data_dir)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trainer data inspect: error: ") and "val-00000.bin" in err
