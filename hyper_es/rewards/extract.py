"""Final-answer extraction from completions.

Everything here is linear time (str.rfind, possessive/anchored regexes, bounded
windows), so megabyte-sized adversarial completions cost milliseconds.
"""

from __future__ import annotations

import re

__all__ = ["final_answer", "last_tag", "last_boxed", "last_number"]

MAX_BOXED = 10_000  # a \boxed{...} body longer than this is treated as absent
_NUMBER_WINDOW = 2_000  # last_number only looks this far back from the last digit

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*+\{")
_BRACE = re.compile(r"\\[{}]|[{}]")  # escaped braces \{ \} do not count
_DIGIT = re.compile(r"\d", re.ASCII)
# Optional sign (not after a word char / ')' so "10-5" yields 5), digits with
# optional ",ddd" groups and decimals, or ".5", optionally "/d" for a fraction.
_NUMBER = re.compile(
    r"(?:(?<![\w)])-)?(?<![\d.])(?:\d++(?:,\d{3}(?!\d))*+(?:\.\d++)?+|\.\d++)(?:/\d++(?:\.\d++)?+)?+",
    re.ASCII,
)


def _str(text: object) -> str | None:
    return text if isinstance(text, str) else None


def last_tag(text: str, tag: str) -> str | None:
    """Content of the last complete ``<tag>...</tag>`` pair, stripped, or None."""
    if _str(text) is None:
        return None
    end = text.rfind(f"</{tag}>")
    if end < 0:
        return None
    start = text.rfind(f"<{tag}>", 0, end)
    if start < 0:
        return None
    return text[start + len(tag) + 2 : end].strip()


def last_boxed(text: str) -> str | None:
    """Body of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces ok), or None."""
    if _str(text) is None:
        return None
    pos = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if pos < 0:
        return None
    m = _BOXED.match(text, pos)
    if m is None:
        return None
    depth, start = 1, m.end()
    for b in _BRACE.finditer(text, start, start + MAX_BOXED + 1):
        tok = b.group()
        if len(tok) == 2:
            continue
        depth += 1 if tok == "{" else -1
        if depth == 0:
            return text[start : b.start()].strip()
    return None  # unbalanced or too long


def last_number(text: str) -> str | None:
    """The last number in the text ("1,234.5", "-3", "3/4", ".5"); ASCII digits only."""
    if _str(text) is None:
        return None
    m = _DIGIT.search(text[::-1])
    if m is None:
        return None
    end = len(text) - m.start()
    last = None
    for last in _NUMBER.finditer(text, max(0, end - _NUMBER_WINDOW), end):
        pass
    return last.group() if last else None


def final_answer(text: str) -> str | None:
    """Final answer: last <answer> tag, else last \\boxed, else after last ####, else last number.

    A \\boxed inside the <answer> tag is unwrapped.
    """
    if _str(text) is None:
        return None
    ans = last_tag(text, "answer")
    if ans is not None:
        return last_boxed(ans) or ans
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    pos = text.rfind("####")
    if pos >= 0:
        line = text[pos + 4 :].lstrip().split("\n", 1)[0].strip()
        if line:
            return line
    return last_number(text)
