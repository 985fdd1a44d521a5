"""The resident vLLM engine for ES: θ's master and the noise live in the worker (`ESWorker`), so a member costs
one RPC of a seed and a scale, and an update one RPC of the iteration's seeds and normalised rewards."""

from __future__ import annotations

from pathlib import Path

from hyper_es.engine.vllm import VLLMGenerator
from hyper_es.errors import HyperESError
from hyper_es.es.engine import Member

WORKER = "hyper_es.es.vllm_worker.ESWorker"


class VLLMES(VLLMGenerator):
    last_fidelity = 0.0

    def __init__(self, model: str | Path, tokenizer, *, architecture: str, scope: str, start: Path | None = None,
                 lora=None, noise: str = "table", **engine_kwargs):
        super().__init__(model, tokenizer, worker_extension_cls=WORKER, **engine_kwargs)
        spec = {"base": str(model), "architecture": architecture, "scope": scope, "noise": noise,
                "start": None if start is None else str(start),
                "lora": None if lora is None else {"r": lora.r, "alpha": lora.alpha, "targets": list(lora.targets)}}
        loaded = self.llm.collective_rpc("es_load", args=(spec,))[0]
        if "error" in loaded:
            self.close()
            raise HyperESError(loaded["error"])
        self.es_tensors, self.es_names = loaded["tensors"], loaded["names"]
        self.last_timing: dict[str, float] = {}

    def set_genome(self, member: Member | None) -> None:
        """Install θ + scale·ε(seed) for a member, θ itself for None (exact: from the worker's fp32 master)."""
        seed, scale = (None, 0.0) if member is None else (int(member.seed), float(member.scale))
        self.last_timing = self.llm.collective_rpc("es_set", args=(seed, scale))[0]
        self.llm.reset_prefix_cache()  # stale KV of the old weights would otherwise be reused

    def restore(self) -> None:
        self.set_genome(None)

    def update(self, seeds, z, sigma: float, alpha: float, signs) -> None:
        args = ([int(s) for s in seeds], [float(v) for v in z], float(sigma), float(alpha), [int(s) for s in signs])
        self.last_timing = self.llm.collective_rpc("es_update", args=args)[0]
        self.llm.reset_prefix_cache()
