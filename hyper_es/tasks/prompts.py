"""Prompt building: template filled from row fields, optional system turn and few-shot turns, chat template."""

from __future__ import annotations

import string
import weakref
from typing import Any

from hyper_es.errors import DataError
from hyper_es.recipe import PromptConfig


def fill(template: str, row: dict, where: str) -> str:
    """`template.format(**row)` restricted to plain field names (no attribute or index access)."""
    out = []
    for literal, field, spec, conv in string.Formatter().parse(template):
        out.append(literal)
        if field is None:
            continue
        if not field.isidentifier():
            raise DataError(f"{where}: template field '{{{field}}}' must be a plain column name")
        if field not in row:
            raise DataError(f"{where}: row {row.get('id')!r} has no field '{field}' (columns: {', '.join(row)})")
        value: Any = row[field]
        value = repr(value) if conv == "r" else value
        out.append(format(value, spec or ""))
    return "".join(out)


def messages(prompt: PromptConfig, row: dict, shots: list[dict], where: str) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": prompt.system}] if prompt.system else []
    for shot in shots:
        msgs.append({"role": "user", "content": fill(prompt.template, shot, where)})
        msgs.append({"role": "assistant", "content": fill(prompt.shot_answer, shot, where)})
    msgs.append({"role": "user", "content": fill(prompt.template, row, where)})
    return msgs


def render(tokenizer, msgs: list[dict[str, str]], chat: bool) -> str:
    """Prompt text: the tokenizer's chat template, or plain turns joined by blank lines."""
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise DataError("prompt.chat is true but the tokenizer has no chat template; set prompt.chat: false")
        return tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    return plain_text(msgs)


def plain_text(msgs: list[dict[str, str]]) -> str:
    """A prompt without a chat template: the turns joined by blank lines."""
    return "\n\n".join(m["content"] for m in msgs) + "\n\n"


_token_chars: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def max_token_chars(tokenizer) -> int:
    """The most characters one token can stand for: the longest vocabulary entry, special tokens included.

    A text of C characters has at least C / max_token_chars tokens, so a text that cannot fit is refused without
    tokenising it (byte-level BPE takes minutes on a multi-megabyte word). An entry's length bounds the text it
    matches: byte-level entries spell one character per byte, SentencePiece entries one per character. (It would
    not hold for a tokenizer whose normaliser drops characters; the causal LMs' tokenizers do not.)"""
    try:
        return _token_chars[tokenizer]
    except (KeyError, TypeError):
        pass
    n = max(1, max(map(len, tokenizer.get_vocab()), default=1))
    try:
        _token_chars[tokenizer] = n
    except TypeError:  # not weak-referenceable: computed again next time
        pass
    return n
