"""Prompt building: template filled from row fields, optional system turn and few-shot turns, chat template."""

from __future__ import annotations

import string
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
