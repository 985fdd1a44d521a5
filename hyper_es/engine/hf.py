"""HF transformers backend: batched `generate` on a resident model (CPU tests, or where vLLM is absent)."""

from __future__ import annotations

import logging

import torch
from transformers import GenerationConfig

from hyper_es.engine.base import Sampling, cut_at_eos, eos_ids
from hyper_es.progress import progress

logger = logging.getLogger(__name__)


class HFGenerator:
    backend = "hf"

    def __init__(self, model, tokenizer, *, batch_size: int = 32, max_model_len: int | None = None):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.max_model_len = max_model_len or getattr(model.config, "max_position_embeddings", None)
        self.eos_ids = eos_ids(model.generation_config, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]

    def _config(self, s: Sampling) -> GenerationConfig:
        # Explicit settings, so neither backend picks up a model's own sampling defaults (top_k=50, penalties, ...).
        return GenerationConfig(
            do_sample=not s.greedy, temperature=s.temperature if not s.greedy else None,
            top_p=s.top_p if not s.greedy else None, top_k=None, num_return_sequences=s.n,
            max_new_tokens=s.max_tokens, eos_token_id=self.eos_ids, pad_token_id=self.pad_id,
            stop_strings=list(s.stop) or None,
        )

    @torch.inference_mode()
    def generate_groups(self, groups: list[tuple[list[list[int]], Sampling]],
                        seeds: list[list[int]] | None = None) -> list[list[list[list[int]]]]:
        """One `generate` per group: HF batches cannot mix max_tokens."""
        seeds = seeds or [None] * len(groups)
        return [self.generate(prompts, sampling, ss) for (prompts, sampling), ss in zip(groups, seeds, strict=True)]

    def generate(self, prompts: list[list[int]], sampling: Sampling,
                 seeds: list[int] | None = None) -> list[list[list[int]]]:
        """Greedy in batches; sampled one prompt at a time, each from its seed (default: the sampling seed plus
        its place), so a prompt's samples do not depend on its batch."""
        cfg, out = self._config(sampling), []
        device = next(self.model.parameters()).device
        size = self.batch_size if sampling.greedy else 1
        batches = range(0, len(prompts), size)
        for b in progress(batches, f"hf generate ({len(prompts)} prompts × {sampling.n})"):
            batch = prompts[b : b + size]
            width = max(map(len, batch))
            ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in batch], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
            if not sampling.greedy:
                torch.manual_seed(seeds[b] if seeds is not None else sampling.seed + b)
            gen = self.model.generate(
                input_ids=ids, attention_mask=mask, generation_config=cfg,
                tokenizer=self.tokenizer if sampling.stop else None,
            )[:, width:].tolist()
            for i in range(len(batch)):
                out.append([cut_at_eos(g, self.eos_ids) for g in gen[i * sampling.n : (i + 1) * sampling.n]])
        return out

    def close(self) -> None:
        pass
