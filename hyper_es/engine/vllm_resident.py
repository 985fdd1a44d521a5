"""The resident vLLM engine: the weight source lives inside the worker (engine/vllm_worker.py), so the driver sends
only a candidate (a coefficient vector, or an ES member's seed and scale) and an ES step's seeds and rewards."""

from __future__ import annotations

from pathlib import Path

from hyper_es.engine.vllm import VLLMGenerator
from hyper_es.errors import HyperESError

WORKER = "hyper_es.engine.vllm_worker.HyperESWorker"


class VLLMResident(VLLMGenerator):
    """`set_genome(g)` installs candidate g (None: the source's resting weights); `restore()` those; `update` an ES
    step. `last_timing` is the worker's split of the last call, `last_fidelity` its fidelity (as HFResident).
    `load(weights)` swaps in another weight source on the same base without a restart; `unload()` serves the
    checkpoint again. Started without `weights`, the engine serves the checkpoint until a source is loaded."""

    show_progress = False

    def __init__(self, model: str | Path, tokenizer, weights=None, workdir: Path | None = None, **engine_kwargs):
        # The worker keeps vLLM's own thread settings: weights are written while generation is paused.
        super().__init__(model, tokenizer, worker_extension_cls=WORKER, **engine_kwargs)
        self._forget()
        self.last_fidelity, self.last_timing = 0.0, {}
        if weights is not None:
            try:
                self.load(weights, workdir)
            except HyperESError:
                self.close()
                raise

    def load(self, weights, workdir: Path | None = None) -> None:
        """Bind `weights` (sources.MergeWeights or ESWeights of this engine's base model) and install their resting
        weights; a source loaded before is unloaded first."""
        if Path(weights.base).resolve() != self.model_path.resolve():
            raise HyperESError(f"this engine serves {self.model_path}; the weights given are for {weights.base}")
        loaded = self.llm.collective_rpc("hx_load", args=(weights.worker_spec(workdir),))[0]
        self.llm.reset_prefix_cache()
        if "error" in loaded:
            self._forget()
            raise HyperESError(loaded["error"])
        self.encode = weights.source_cls.encode
        self.targets, self.names = loaded["targets"], loaded["names"]

    def unload(self) -> None:
        """The checkpoint's weights back, and no source."""
        self.llm.collective_rpc("hx_unload")
        self.llm.reset_prefix_cache()
        self._forget()

    def _forget(self) -> None:
        """No source: no candidate encoding, no targets."""
        self.encode, self.targets, self.names = None, 0, []

    def _loaded(self) -> None:
        if self.encode is None:
            raise HyperESError("no weight source is loaded in this engine (VLLMResident.load)")

    def set_genome(self, genome) -> None:
        self._loaded()
        self.last_timing = self.llm.collective_rpc("hx_set", args=(self.encode(genome),))[0]
        self.last_fidelity = self.last_timing.get("fidelity", 0.0)
        self.llm.reset_prefix_cache()  # stale KV of the old weights would otherwise be reused

    def restore(self) -> None:
        self.set_genome(None)

    def update(self, seeds, z, sigma: float, alpha: float, signs) -> None:
        self._loaded()
        args = ([int(s) for s in seeds], [float(v) for v in z], float(sigma), float(alpha), [int(s) for s in signs])
        self.last_timing = self.llm.collective_rpc("hx_update", args=args)[0]
        self.llm.reset_prefix_cache()
