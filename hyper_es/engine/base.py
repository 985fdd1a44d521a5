"""The evaluator interface shared by the HF and vLLM backends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hyper_es.errors import ConfigError


@dataclass(frozen=True)
class Sampling:
    """Decoding settings. temperature 0 means greedy (then n must be 1)."""

    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.n < 1 or self.max_tokens < 1:
            raise ConfigError(f"n and max_tokens must be >= 1, got n={self.n}, max_tokens={self.max_tokens}")
        if self.temperature == 0 and self.n > 1:
            raise ConfigError(f"greedy decoding gives one sample per prompt; n={self.n} needs temperature > 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Generator(Protocol):
    """Generates completion token ids for tokenised prompts; one list of n completions per prompt."""

    backend: str
    max_model_len: int | None  # prompt + completion tokens the engine takes (prompts are checked against it)

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[list[list[int]]]: ...

    def generate_groups(self, groups: list[tuple[list[list[int]], Sampling]]) -> list[list[list[list[int]]]]: ...

    def close(self) -> None: ...


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """Cut the text before the first stop string (the same rule for every backend)."""
    cut = min((i for s in stop if (i := text.find(s)) >= 0), default=-1)
    return text if cut < 0 else text[:cut]


def eos_ids(generation_config, tokenizer) -> list[int]:
    """End-of-sequence ids: the model's generation config plus the tokenizer's eos."""
    ids = getattr(generation_config, "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def cut_at_eos(ids: list[int], eos: list[int]) -> list[int]:
    """Generated ids up to (not including) the first end-of-sequence token."""
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i]
    return ids
