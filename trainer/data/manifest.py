"""manifest.json of a token-shard directory: its fields, loading, and verifying the shards.

A data directory is valid only once its manifest exists (the encoder writes it last);
the manifest records, per split, each shard's file, sha256, token and document counts,
so a flipped byte, a swapped shard or a shard from another tokenizer is caught before
training reads it.

    manifest = load_manifest(data_dir)              # fields + every shard's sha256/header
    tokens = open_shard(manifest, manifest.shards("train")[0])
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gates.io.files import read_regular, sha256_file
from trainer.data.shards import ShardError, dtype_for_vocab, read_shard

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "shipgate-token-shards"
MANIFEST_VERSION = 1
SPLITS = ("train", "val")
#: A manifest lists a few shards per split: kilobytes. Far past that it is not one.
MANIFEST_LIMIT = 64 * 1024 * 1024

# Required fields (dotted paths) and their JSON types; bool is excluded from int below.
_TOP_FIELDS: dict[str, type] = {
    "format": str,
    "format_version": int,
    "tokenizer": dict,
    "tokenizer.sha256": str,
    "tokenizer.vocab_size": int,
    "tokenizer.eot_token": str,
    "tokenizer.eot_id": int,
    "dtype": str,
    "shard_tokens": int,
    "val_split": dict,
    "sources": dict,
    "sources.files": int,
    "sources.skipped": int,
    "sources.empty_documents": int,
    "splits": dict,
    "totals": dict,
    "totals.documents": int,
    "totals.tokens": int,
}
_SPLIT_FIELDS: dict[str, type] = {"documents": int, "tokens": int, "shards": list}
_SHARD_FIELDS: dict[str, type] = {"file": str, "sha256": str, "tokens": int, "documents": int}


@dataclass(frozen=True)
class ShardEntry:
    file: str
    sha256: str
    tokens: int
    documents: int  # documents whose end-of-text token lies in this shard


@dataclass(frozen=True)
class Manifest:
    directory: Path
    data: dict  # the parsed manifest.json
    sha256: str  # of manifest.json's bytes: identifies this exact data set

    @property
    def path(self) -> Path:
        return self.directory / MANIFEST_NAME

    @property
    def vocab_size(self) -> int:
        return self.data["tokenizer"]["vocab_size"]

    @property
    def eot_id(self) -> int:
        return self.data["tokenizer"]["eot_id"]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data["dtype"])

    def shards(self, split: str) -> list[ShardEntry]:
        return [ShardEntry(**s) for s in self.data["splits"][split]["shards"]]


def _lookup(data: dict, dotted: str, want: type, where: str) -> object:
    """The value at ``dotted`` ("a.b.0.c": keys, or indices into lists), of type ``want``."""
    value: object = data
    for key in dotted.split("."):
        if isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise ShardError(f"{where}: missing field {dotted}")
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        raise ShardError(f"{where}: field {dotted} is {value!r}, not {want.__name__}")
    return value


def check_fields(data: object, where: str) -> None:
    """Raise ShardError naming ``where`` and the first missing, mistyped or inconsistent
    field of a parsed manifest."""
    if not isinstance(data, dict):
        raise ShardError(f"{where}: not a JSON object")
    for dotted, want in _TOP_FIELDS.items():
        _lookup(data, dotted, want, where)
    if data["format"] != MANIFEST_FORMAT or data["format_version"] != MANIFEST_VERSION:
        raise ShardError(
            f"{where}: format {data['format']!r} version {data['format_version']} is not "
            f"{MANIFEST_FORMAT!r} version {MANIFEST_VERSION}"
        )
    vocab_size = data["tokenizer"]["vocab_size"]
    try:
        expected_dtype = dtype_for_vocab(vocab_size).name
    except ValueError as exc:
        raise ShardError(f"{where}: field tokenizer.vocab_size: {exc}") from None
    if data["dtype"] != expected_dtype:
        raise ShardError(
            f"{where}: field dtype is {data['dtype']!r}; vocab_size {vocab_size} is stored as "
            f"{expected_dtype!r}"
        )
    documents = tokens = 0
    for split in SPLITS:
        for name, want in _SPLIT_FIELDS.items():
            _lookup(data, f"splits.{split}.{name}", want, where)
        shards = data["splits"][split]["shards"]
        for i, shard in enumerate(shards):
            for name, want in _SHARD_FIELDS.items():
                _lookup(data, f"splits.{split}.shards.{i}.{name}", want, where)
            if Path(shard["file"]).name != shard["file"] or shard["file"] in {"", ".", ".."}:
                raise ShardError(
                    f"{where}: field splits.{split}.shards.{i}.file {shard['file']!r} is not a "
                    "plain file name in the data directory"
                )
        split_info = data["splits"][split]
        for count in ("tokens", "documents"):
            if split_info[count] != sum(s[count] for s in shards):
                raise ShardError(
                    f"{where}: field splits.{split}.{count} is {split_info[count]}, its shards sum "
                    f"to {sum(s[count] for s in shards)}"
                )
        documents += split_info["documents"]
        tokens += split_info["tokens"]
    if (data["totals"]["documents"], data["totals"]["tokens"]) != (documents, tokens):
        raise ShardError(
            f"{where}: totals {data['totals']} disagree with the splits "
            f"(documents {documents}, tokens {tokens})"
        )


def open_shard(manifest: Manifest, entry: ShardEntry) -> np.ndarray:
    """The shard's tokens, after checking its header agrees with the manifest."""
    path = manifest.directory / entry.file
    tokens = read_shard(
        path, expected_vocab_size=manifest.vocab_size, expected_dtype=manifest.dtype
    )
    if len(tokens) != entry.tokens:
        raise ShardError(f"shard {path}: {len(tokens)} tokens, {MANIFEST_NAME} says {entry.tokens}")
    return tokens


def verify_shard(manifest: Manifest, entry: ShardEntry) -> None:
    """sha256, header and document count of one shard against the manifest."""
    path = manifest.directory / entry.file
    try:
        actual = sha256_file(path)
    except OSError as exc:
        raise ShardError(f"shard {path}: cannot read: {exc.strerror or exc}") from None
    if actual != entry.sha256:
        raise ShardError(
            f"shard {path}: sha256 mismatch: {MANIFEST_NAME} says {entry.sha256}, "
            f"file has {actual} (corrupt or replaced)"
        )
    tokens = open_shard(manifest, entry)
    documents = int(np.count_nonzero(tokens == manifest.eot_id))
    if documents != entry.documents:
        raise ShardError(
            f"shard {path}: {documents} end-of-text tokens, {MANIFEST_NAME} says "
            f"{entry.documents} documents"
        )


def load_manifest(
    directory: Path, verify: bool = True, splits: tuple[str, ...] = SPLITS
) -> Manifest:
    """Parse and check ``directory/manifest.json``; with ``verify``, also check every
    shard of ``splits`` (sha256, header, counts). Raises ShardError naming the file."""
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    try:
        raw = read_regular(path, MANIFEST_LIMIT)  # a FIFO or a device is refused, not read
    except OSError as exc:
        raise ShardError(
            f"{path}: cannot read: {exc.strerror or exc} (not an encoded data directory, "
            "or its encode did not finish)"
        ) from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ShardError(f"{path}: not valid JSON ({exc})") from None
    check_fields(data, str(path))
    manifest = Manifest(directory, data, hashlib.sha256(raw).hexdigest())
    unknown = set(splits) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; splits are {list(SPLITS)}")
    if verify:
        for split in splits:
            for entry in manifest.shards(split):
                verify_shard(manifest, entry)
    return manifest
