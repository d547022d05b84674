"""Byte-level pre-tokenization, equal to Hugging Face ``ByteLevel(add_prefix_space=False)``.

- The GPT-2 pattern, with letter/number classes as HF applies them (Unicode 16; see
  unicode_classes.py), not as the installed `regex` package would (Unicode 17).
- Each piece's UTF-8 bytes are written with the GPT-2 byte→unicode map, so every token
  is printable text and the 256 mapped bytes form the initial alphabet.
- Files are read as HF's trainer reads them: split on "\\n" only, which stays on its line
  ("\\r" too), and the pattern runs within each line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import regex

from trainer.tokenizer.unicode_classes import LETTER_RANGES, NUMBER_RANGES


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(f"\\U{a:08X}" if a == b else f"\\U{a:08X}-\\U{b:08X}" for a, b in ranges)


_L, _N = _char_class(LETTER_RANGES), _char_class(NUMBER_RANGES)
GPT2_PATTERN = regex.compile(
    rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{_L}]+| ?[{_N}]+| ?[^\s{_L}{_N}]+|\s+(?!\S)|\s+"
)
# The same pattern for ASCII-only text, ~10x faster: the only ASCII letters and numbers
# are [A-Za-z] and [0-9], and \s agrees with HF's on every code point (probed).
ASCII_PATTERN = regex.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"
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


def from_mapped(tokens: str) -> bytes:
    return bytes(CHAR_TO_BYTE[c] for c in tokens)


def _pattern(text: str) -> regex.Pattern:
    return ASCII_PATTERN if text.isascii() else GPT2_PATTERN


def pretokenize(text: str) -> list[str]:
    """Pieces of one line (or any text without a line break), byte-mapped."""
    return [to_mapped(p) for p in _pattern(text).findall(text)]


def lines(text: str) -> Iterator[str]:
    """Split as HF's file reader does: on "\\n" only, keeping it."""
    start = 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            if start < len(text):
                yield text[start:]
            return
        yield text[start : end + 1]
        start = end + 1


def count_words(texts: Iterable[str]) -> Counter[str]:
    """Distinct byte-mapped pre-tokens and how often each occurs, line by line."""
    raw: Counter[str] = Counter()
    for text in texts:
        for line in lines(text):
            raw.update(_pattern(line).findall(line))
    # Byte-map each distinct piece once, not every occurrence.
    counts: Counter[str] = Counter()
    for piece, n in raw.items():
        counts[to_mapped(piece)] += n
    return counts
