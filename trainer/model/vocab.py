"""Model and tokenizer vocabularies must agree exactly; a mismatch is refused, never padded.

No torch. Contract: C-LLAMA-370M-SOVEREIGN, INV-ARCH-370M-006
(model.vocab_size == len(tokenizer vocab) == max(tokenizer ids) + 1).

    n = tokenizer_vocab_size("runs/demo/tokenizer")        # a directory or a tokenizer.json
    check_vocab_agreement(cfg.vocab_size, n, tokenizer_path="runs/demo/tokenizer")
"""

from __future__ import annotations

import json
from pathlib import Path

from trainer.tokenizer.model import TokenizerFileError


class VocabMismatchError(ValueError):
    """Model and tokenizer vocab sizes differ; the message names both numbers."""

    def __init__(self, model_vocab_size: int, tokenizer_vocab_size: int, message: str) -> None:
        self.model_vocab_size = model_vocab_size
        self.tokenizer_vocab_size = tokenizer_vocab_size
        super().__init__(message)


def tokenizer_vocab_size(path: str | Path) -> int:
    """Entries of a tokenizer.json (or a directory holding one): model.vocab plus any added
    token with an id of its own. Ids must be exactly 0 .. n-1; a gap names the missing id."""
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TokenizerFileError(f"{file}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokenizerFileError(f"{file}: not JSON ({exc})") from None
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(vocab, dict) or not vocab:
        raise TokenizerFileError(f"{file}: model.vocab is missing or empty")
    added = data.get("added_tokens") or []
    if not isinstance(added, list):
        raise TokenizerFileError(f"{file}: added_tokens is not a list")
    ids: set[int] = set()
    for where, token, i in [("model.vocab", t, i) for t, i in vocab.items()] + [
        ("added_tokens", a.get("content") if isinstance(a, dict) else a, _added_id(a))
        for a in added
    ]:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise TokenizerFileError(f"{file}: {where} id {i!r} of {token!r} is not an id >= 0")
        ids.add(i)
    n = len(ids)
    if max(ids) != n - 1:
        missing = min(set(range(max(ids) + 1)) - ids)
        raise TokenizerFileError(
            f"{file}: token ids have a gap: id {missing} is missing ({n} distinct ids, highest "
            f"{max(ids)}), so len(vocab) != highest id + 1 and no vocab size fits both"
        )
    return n


def _added_id(entry: object) -> object:
    return entry.get("id") if isinstance(entry, dict) else None


def _vocab_sizes_agree(model_vocab_size: int, tokenizer_vocab_size: int) -> bool:
    return model_vocab_size == tokenizer_vocab_size


def check_vocab_agreement(
    model_vocab_size: int,
    tokenizer_vocab_size: int,
    *,
    tokenizer_path: str | Path | None = None,
) -> None:
    """Refuse (VocabMismatchError) unless the two sizes are equal. Nothing is resized."""
    if _vocab_sizes_agree(model_vocab_size, tokenizer_vocab_size):
        return
    source = f" ({tokenizer_path})" if tokenizer_path is not None else ""
    if model_vocab_size > tokenizer_vocab_size:
        why = f"{model_vocab_size - tokenizer_vocab_size} embedding rows no token can reach"
    else:
        why = f"ids {model_vocab_size}..{tokenizer_vocab_size - 1} would index past the embedding"
    raise VocabMismatchError(
        model_vocab_size,
        tokenizer_vocab_size,
        f"model vocab_size {model_vocab_size} != tokenizer vocab size {tokenizer_vocab_size}"
        f"{source}: {why}; set the model's vocab_size to {tokenizer_vocab_size} "
        "(vocabularies are never padded or truncated)",
    )
