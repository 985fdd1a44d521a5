"""The evaluator interface shared by the HF and vLLM backends."""

from __future__ import annotations

from typing import Protocol

from hyper_es.sampling import Sampling, truncate_at_stop  # noqa: F401  (re-exported)


class Generator(Protocol):
    """Generates completion token ids for tokenised prompts; one list of n completions per prompt. Sampled prompts
    each draw from their own seed (`seeds`), whatever else is in the batch."""

    backend: str
    max_model_len: int | None  # prompt + completion tokens the engine takes (prompts are checked against it)

    def generate(self, prompts: list[list[int]], sampling: Sampling,
                 seeds: list[int] | None = None) -> list[list[list[int]]]: ...

    def generate_groups(self, groups: list[tuple[list[list[int]], Sampling]],
                        seeds: list[list[int]] | None = None) -> list[list[list[list[int]]]]: ...

    def close(self) -> None: ...


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
