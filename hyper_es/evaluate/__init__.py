"""Evaluators: one interface (`Generator`), two backends (HF transformers, vLLM), and the task runner."""

from __future__ import annotations

from pathlib import Path

from hyper_es.evaluate.base import Generator, Sampling
from hyper_es.evaluate.passk import mean_pass_at_k, pass_at_k
from hyper_es.evaluate.runner import TaskResult, evaluate_task

__all__ = ["Generator", "Sampling", "TaskResult", "evaluate_task", "make_generator", "pass_at_k", "mean_pass_at_k"]


def make_generator(backend: str, model: str, *, dtype: str = "auto", batch_size: int = 32, seed: int = 0,
                   max_model_len: int = 2048, revision: str | None = None, trust_remote_code: bool = False):
    """(generator, tokenizer) for a model name (built-in, folder or hub id). dtype 'auto': vLLM bf16, HF fp32."""
    from hyper_es import models

    if backend == "vllm":
        from transformers import AutoTokenizer

        from hyper_es.evaluate.vllm import VLLMGenerator

        path = models.resolve(model, revision=revision)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)

        dtype = "bfloat16" if dtype == "auto" else dtype
        return VLLMGenerator(Path(path), tokenizer, dtype=dtype, max_model_len=max_model_len, seed=seed,
                             trust_remote_code=trust_remote_code), tokenizer
    if backend == "hf":
        from hyper_es.evaluate.hf import HFGenerator

        dtype = "float32" if dtype == "auto" else dtype
        model_obj, tokenizer = models.load(model, dtype=dtype, revision=revision, trust_remote_code=trust_remote_code)
        return HFGenerator(model_obj, tokenizer, batch_size=batch_size), tokenizer
    raise ValueError(f"unknown backend '{backend}'; expected one of: vllm, hf")
