"""A trained byte-level BPE: encode, decode, save and load.

Encodes as Hugging Face `tokenizers` does with the tokenizer.json we write: special
tokens are split out first (longest first), the GPT-2 pattern runs over the rest of the
text, and each piece is merged by rank (lowest first, leftmost first). Pieces are cached.
Files: tokenizer.json (loads with ``tokenizers.Tokenizer.from_file``), vocab.json and
merges.txt; written together (save: all three complete before any is renamed into place).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gates.io.files import fsync_dir, write_temp
from trainer.tokenizer.bpe import BpeModel
from trainer.tokenizer.pretokenize import CHAR_TO_BYTE, _pattern, to_mapped

CACHE_LIMIT = 1 << 20  # distinct pieces kept; code has a long tail, memory is bounded


def _missing_dirs(directory: Path) -> list[Path]:
    """``directory`` and those of its parents that do not exist yet, innermost first."""
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    return missing


class TokenizerFileError(ValueError):
    """A tokenizer directory or file is missing, malformed or inconsistent (names the file)."""


@dataclass
class ByteLevelBPE:
    vocab: tuple[str, ...]
    merges: tuple[tuple[str, str], ...]
    special_tokens: tuple[str, ...]
    _ids: dict[str, int] = field(init=False, repr=False)
    _ranks: dict[tuple[int, int], tuple[int, int]] = field(init=False, repr=False)
    _cache: dict[str, tuple[int, ...]] = field(init=False, repr=False, default_factory=dict)
    _specials: re.Pattern | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._ids = {t: i for i, t in enumerate(self.vocab)}
        if len(self._ids) != len(self.vocab):
            raise TokenizerFileError("vocab has duplicate tokens")
        self._ranks = {}
        for rank, (a, b) in enumerate(self.merges):
            try:
                pair = (self._ids[a], self._ids[b])
                self._ranks[pair] = (rank, self._ids[a + b])
            except KeyError as exc:
                raise TokenizerFileError(
                    f"merge {rank} ({a!r} {b!r}) uses or makes a token not in the vocab: {exc}"
                ) from None
        specials = sorted(self.special_tokens, key=len, reverse=True)
        self._specials = re.compile("|".join(re.escape(s) for s in specials)) if specials else None

    @classmethod
    def from_model(cls, model: BpeModel) -> ByteLevelBPE:
        return cls(model.vocab, model.merges, model.special_tokens)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def token_to_id(self, token: str) -> int | None:
        return self._ids.get(token)

    # ---------------------------------------------------------------- encode / decode
    def _bpe(self, piece: str) -> tuple[int, ...]:
        cached = self._cache.get(piece)
        if cached is not None:
            return cached
        word = [self._ids[c] for c in to_mapped(piece)]
        ranks = self._ranks
        while len(word) > 1:
            best = min(
                ((ranks[p][0], i) for i, p in enumerate(itertools.pairwise(word)) if p in ranks),
                default=None,
            )
            if best is None:
                break
            a, b = word[best[1]], word[best[1] + 1]
            new = ranks[(a, b)][1]
            out, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == a and word[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        result = tuple(word)
        if len(self._cache) < CACHE_LIMIT:
            self._cache[piece] = result
        return result

    def _encode_plain(self, text: str, out: list[int]) -> None:
        for piece in _pattern(text).findall(text):
            out.extend(self._bpe(piece))

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        if self._specials is None:
            self._encode_plain(text, out)
            return out
        start = 0
        for m in self._specials.finditer(text):
            self._encode_plain(text[start : m.start()], out)
            out.append(self._ids[m.group()])
            start = m.end()
        self._encode_plain(text[start:], out)
        return out

    def decode(self, ids: Iterable[int]) -> str:
        data = bytearray()
        specials = set(self.special_tokens)
        for i in ids:
            token = self.vocab[i]
            if token in specials:
                data += token.encode("utf-8")
            else:
                data += bytes(CHAR_TO_BYTE[c] for c in token)
        return data.decode("utf-8", errors="replace")

    # ---------------------------------------------------------------- files
    def tokenizer_json(self) -> dict:
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [
                {
                    "id": self._ids[s],
                    "content": s,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
                for s in self.special_tokens
            ],
            "normalizer": None,
            "pre_tokenizer": {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": True,
                "use_regex": True,
            },
            "post_processor": None,
            "decoder": {
                "type": "ByteLevel",
                "add_prefix_space": True,
                "trim_offsets": True,
                "use_regex": True,
            },
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": False,
                "vocab": dict(self._ids),
                "merges": [list(m) for m in self.merges],
            },
        }

    def save(self, out_dir: Path) -> list[Path]:
        """Write the three files into ``out_dir`` (made, with its parents, if missing) and
        return their paths. All three are written to temp files first and renamed only
        once every one is complete: a write that fails (a full disk, a file size limit:
        OSError) leaves no temp file, removes the directories it made, and leaves files
        already there as they were."""
        files = {
            "tokenizer.json": json.dumps(self.tokenizer_json(), ensure_ascii=False),
            "vocab.json": json.dumps(self._ids, ensure_ascii=False),
            "merges.txt": "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in self.merges),
        }
        made = _missing_dirs(out_dir)
        staged: list[tuple[Path, Path]] = []
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                staged.append((write_temp(out_dir / name, text.encode("utf-8")), out_dir / name))
        except BaseException:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
            for directory in made:  # innermost first; only while still empty
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise
        for tmp, target in staged:
            os.replace(tmp, target)
        fsync_dir(out_dir)
        return [target for _, target in staged]

    @classmethod
    def load(cls, directory: Path) -> ByteLevelBPE:
        path = directory / "tokenizer.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            model = data["model"]
            if model.get("type") != "BPE":
                raise TokenizerFileError(f"{path}: model.type is {model.get('type')!r}, not BPE")
            ids = model["vocab"]
            vocab = [None] * len(ids)
            for tok, i in ids.items():
                if not isinstance(i, int) or not 0 <= i < len(ids) or vocab[i] is not None:
                    raise TokenizerFileError(
                        f"{path}: model.vocab id {i!r} of {tok!r} is not a "
                        "unique id in 0..len(vocab)-1"
                    )
                vocab[i] = tok
            merges = tuple(
                tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model["merges"]
            )
            specials = tuple(t["content"] for t in data.get("added_tokens", []) if t["special"])
        except OSError as exc:
            raise TokenizerFileError(f"{path}: {exc.strerror or exc}") from None
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise TokenizerFileError(f"{path}: not a BPE tokenizer.json ({exc})") from None
        try:
            return cls(tuple(vocab), merges, specials)
        except TokenizerFileError as exc:
            raise TokenizerFileError(f"{path}: {exc}") from None
