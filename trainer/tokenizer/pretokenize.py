"""Byte-level pre-tokenization, equal to Hugging Face ``ByteLevel(add_prefix_space=False)``.

- The GPT-2 pattern, with letter, number and whitespace classes exactly as HF applies them
  (Unicode 16; see unicode_classes.py). The `regex` package's \\p{L} / \\p{N} follow
  Unicode 17 and would split ~17k code points differently, so the classes are spelled out,
  and then the standard library's `re` runs the pattern: it compiles big classes to
  bitmaps, 4x faster than `regex` on non-ASCII lines and 1.8x on ASCII (measured here).
- Each piece's UTF-8 bytes are written with the GPT-2 byte→unicode map, so every token
  is printable text and the 256 mapped bytes form the initial alphabet.
- Files are counted as HF's trainer reads them: split after each "\\n" ("\\r" stays on
  its line) and the pattern run within each line (file_pieces).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from trainer.tokenizer.unicode_classes import LETTER_RANGES, NUMBER_RANGES, WHITESPACE_RANGES


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(f"\\U{a:08X}" if a == b else f"\\U{a:08X}-\\U{b:08X}" for a, b in ranges)


_L, _N, _S = (_char_class(r) for r in (LETTER_RANGES, NUMBER_RANGES, WHITESPACE_RANGES))
_CONTRACTIONS = "'(?:s|t|re|ve|m|ll|d)"  # same order as GPT-2's 's|'t|'re|'ve|'m|'ll|'d
#: The GPT-2 pattern, as HF's encoder applies it to any text; \s+(?!\S) is [S]+(?![^S]).
GPT2_PATTERN = re.compile(
    rf"{_CONTRACTIONS}| ?[{_L}]+| ?[{_N}]+| ?[^{_S}{_L}{_N}]+|[{_S}]+(?![^{_S}])|[{_S}]+"
)
# The same pattern for ASCII-only text, ~3x faster again: on ASCII the letters are
# [A-Za-z], the numbers [0-9] and the whitespace these six characters.
_WS = "\t\n\x0b\x0c\r "
ASCII_PATTERN = re.compile(
    rf"{_CONTRACTIONS}| ?[A-Za-z]+| ?[0-9]+| ?[^{_WS}A-Za-z0-9]+|[{_WS}]+(?![^{_WS}])|[{_WS}]+"
)
# HF's trainer reads files line by line (split after each "\n") and runs the pattern per
# line, so a whitespace run never continues past a "\n". The same split in one pass over a
# run of ASCII lines: a run of whitespace other than "\n" either ends the line together
# with its "\n", or behaves as \s+(?!\S) | \s+ within the line.
_WS_NO_NL = "\t\x0b\x0c\r "
FILE_ASCII_PATTERN = re.compile(
    rf"{_CONTRACTIONS}| ?[A-Za-z]+| ?[0-9]+| ?[^{_WS}A-Za-z0-9]+"
    rf"|[{_WS_NO_NL}]*\n|[{_WS_NO_NL}]+(?![^{_WS}])|[{_WS_NO_NL}]+"
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map: printable Latin-1 bytes stand for themselves, the other 68 bytes take
    the code points from 256 up, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


BYTE_TO_CHAR: dict[int, str] = _bytes_to_unicode()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in BYTE_TO_CHAR.items()}
#: HF's ``ByteLevel.alphabet()``: the initial alphabet of a byte-level BPE.
ALPHABET: tuple[str, ...] = tuple(sorted(BYTE_TO_CHAR.values()))
# bytes → latin-1 str → mapped str, in C: str.translate over the 256 latin-1 code points.
_TRANSLATE = {b: c for b, c in BYTE_TO_CHAR.items()}


def to_mapped(piece: str) -> str:
    return piece.encode("utf-8").decode("latin-1").translate(_TRANSLATE)


def _pattern(text: str) -> re.Pattern:
    """The GPT-2 pattern for ``text`` as one string (HF's encoder)."""
    return ASCII_PATTERN if text.isascii() else GPT2_PATTERN


def file_pieces(text: str) -> list[str]:
    """Raw pre-tokens of ``text`` read as HF's trainer reads a file: line by line. Runs of
    ASCII lines go through one fast pass; each other line through the full pattern."""
    if text.isascii():
        return FILE_ASCII_PATTERN.findall(text)
    pieces: list[str] = []
    ascii_from = pos = 0  # ascii_from: start of the pending run of ASCII lines
    while pos < len(text):
        end = text.find("\n", pos) + 1 or len(text)
        line = text[pos:end]
        if not line.isascii():
            pieces += FILE_ASCII_PATTERN.findall(text, ascii_from, pos)
            pieces += GPT2_PATTERN.findall(line)
            ascii_from = end
        pos = end
    pieces += FILE_ASCII_PATTERN.findall(text, ascii_from)
    return pieces


def pretokenize(text: str) -> list[str]:
    """Pieces of ``text`` as HF's encoder splits them, byte-mapped."""
    return [to_mapped(p) for p in _pattern(text).findall(text)]


def count_words(texts: Iterable[str]) -> Counter[str]:
    """Distinct byte-mapped pre-tokens and how often each occurs, each text read as HF's
    trainer reads a file."""
    raw: Counter[str] = Counter()
    for text in texts:
        raw.update(file_pieces(text))  # counting a list runs in C
    # Byte-map each distinct piece once, not every occurrence.
    counts: Counter[str] = Counter()
    for piece, n in raw.items():
        counts[to_mapped(piece)] += n
    return counts
