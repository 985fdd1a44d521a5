"""The resident vLLM engine: the weight source lives inside the worker (engine/vllm_worker.py), so the driver sends
only a candidate (a coefficient vector, or an ES member's seed and scale) and an ES step's seeds and rewards."""

from __future__ import annotations

from pathlib import Path

from hyper_es.engine.vllm import VLLMGenerator
from hyper_es.errors import HyperESError

WORKER = "hyper_es.engine.vllm_worker.HyperESWorker"


class VLLMResident(VLLMGenerator):
    """`set_genome(g)` installs candidate g (None: the source's resting weights); `restore()` those; `update` an ES
    step. `last_timing` is the worker's split of the last call, `last_fidelity` its fidelity (as HFResident)."""

    show_progress = False

    def __init__(self, model: str | Path, tokenizer, weights, workdir: Path | None = None, **engine_kwargs):
        # The worker keeps vLLM's own thread settings: weights are written while generation is paused.
        spec = weights.worker_spec(workdir)
        self.encode = weights.source_cls.encode
        super().__init__(model, tokenizer, worker_extension_cls=WORKER, **engine_kwargs)
        loaded = self.llm.collective_rpc("hx_load", args=(spec,))[0]
        if "error" in loaded:
            self.close()
            raise HyperESError(loaded["error"])
        self.targets, self.names = loaded["targets"], loaded["names"]
        self.last_fidelity, self.last_timing = 0.0, {}

    def set_genome(self, genome) -> None:
        self.last_timing = self.llm.collective_rpc("hx_set", args=(self.encode(genome),))[0]
        self.last_fidelity = self.last_timing.get("fidelity", 0.0)
        self.llm.reset_prefix_cache()  # stale KV of the old weights would otherwise be reused

    def restore(self) -> None:
        self.set_genome(None)

    def update(self, seeds, z, sigma: float, alpha: float, signs) -> None:
        args = ([int(s) for s in seeds], [float(v) for v in z], float(sigma), float(alpha), [int(s) for s in signs])
        self.last_timing = self.llm.collective_rpc("hx_update", args=args)[0]
        self.llm.reset_prefix_cache()
