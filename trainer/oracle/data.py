"""The oracle's token data: tokenizer trained on the training split, one sequence per form.

    data = build_oracle_data()
    data.train_sequences[0]      # [eot, ...tokens of "I speak = yo hablo"..., eot]
    data.tokenizer.vocab_size    # 300

Each sequence is <|endoftext|> + the form's line + <|endoftext|>: the leading one is the
begin-of-text token (so the form's first token is predicted too, from the same prefix by
the model and the trigram), the trailing one ends the form and is a target. A separate
<|pad|> special token pads the loop's rows; it is never inside a sequence.

Why V = 300 and not 512: on this 480-line training split a 512-token BPE merges every
training word whole, so the held-out verbs split into sub-word pieces ('a', 'l', ' b', ...)
that never occur as a target in the training stream - 801 of the 1967 validation targets
at V = 512. A model trained by cross-entropy rightly gives a never-seen target almost no
probability while the trigram keeps a 1/V floor, so the comparison would measure the
smoothing floor, not the loop. Every validation target must be a training target
(``build_oracle_data`` refuses otherwise); that holds up to V = 330 on this split, and
300 leaves room below that edge.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.oracle.verbs import VerbForm, all_forms, split_forms
from trainer.tokenizer.bpe import train_fast
from trainer.tokenizer.model import ByteLevelBPE
from trainer.tokenizer.pretokenize import count_words

VOCAB_SIZE = 300  # the module docstring says why: every validation token is a training target
END_OF_TEXT = "<|endoftext|>"
PAD = "<|pad|>"


@dataclass(frozen=True)
class OracleData:
    tokenizer: ByteLevelBPE
    train_forms: list[VerbForm]
    val_forms: list[VerbForm]
    train_sequences: list[list[int]]
    val_sequences: list[list[int]]
    eot_id: int
    pad_id: int

    @property
    def longest(self) -> int:
        """Tokens in the longest sequence of either split."""
        return max(len(s) for s in self.train_sequences + self.val_sequences)


def corpus_text(forms: list[VerbForm]) -> str:
    return "".join(f"{f.line}\n" for f in forms)


def build_oracle_data(vocab_size: int = VOCAB_SIZE) -> OracleData:
    train_forms, val_forms = split_forms(all_forms())
    # The tokenizer sees the training split only: held-out verbs must not shape the vocab.
    bpe = train_fast(
        count_words([corpus_text(train_forms)]),
        vocab_size=vocab_size,
        special_tokens=(END_OF_TEXT, PAD),
    )
    tokenizer = ByteLevelBPE.from_model(bpe)
    if tokenizer.vocab_size != vocab_size:
        raise ValueError(
            f"the tokenizer reached {tokenizer.vocab_size} tokens, not vocab_size {vocab_size}: "
            "the training split has too few distinct merges"
        )
    eot, pad = tokenizer.token_to_id(END_OF_TEXT), tokenizer.token_to_id(PAD)
    if eot is None or pad is None:
        raise ValueError(f"special tokens missing from the vocabulary: eot={eot}, pad={pad}")

    def encode(forms: list[VerbForm]) -> list[list[int]]:
        return [[eot, *tokenizer.encode(f.line), eot] for f in forms]

    train_sequences, val_sequences = encode(train_forms), encode(val_forms)
    check_validation_covered(train_sequences, val_sequences)
    return OracleData(tokenizer, train_forms, val_forms, train_sequences, val_sequences, eot, pad)


def check_validation_covered(
    train_sequences: list[list[int]], val_sequences: list[list[int]]
) -> None:
    """Refuse validation targets that never occur as a training target (see the docstring)."""
    trained = {t for seq in train_sequences for t in seq[1:]}
    unseen = sorted({t for seq in val_sequences for t in seq[1:]} - trained)
    if unseen:
        raise ValueError(
            f"{len(unseen)} validation target id(s) never occur as a training target "
            f"(first: {unseen[:5]}): the tokenizer's vocabulary is too large for this split, "
            "and the perplexity comparison would measure smoothing, not learning"
        )
