"""The resident vLLM engine for the search: merged weights are rewritten inside the worker per candidate."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from hyper_es.engine.vllm import VLLMGenerator
from hyper_es.errors import HyperESError
from hyper_es.merging import Genome, MergeSettings

WORKER = "hyper_es.engine.vllm_worker.HyperESWorker"


class VLLMInPlace(VLLMGenerator):
    """`set_genome(x)` sends only the coefficient vector; `restore()` puts the exact base weights back."""

    show_progress = False

    def __init__(self, model: str | Path, tokenizer, ds, genome: Genome, settings: MergeSettings, workdir: Path,
                 *, fused: bool = False, merge_device: str = "auto", prepare: bool = True,
                 delta_dtype: str = "float32", **engine_kwargs):
        # The worker keeps vLLM's own thread settings: merging runs while generation is paused, on the same cores.
        workdir = Path(workdir)
        set_dir = ds.save(workdir / "directions")
        (workdir / "genome.json").write_text(genome.to_json())
        super().__init__(model, tokenizer, worker_extension_cls=WORKER, **engine_kwargs)
        spec = {"set_dir": str(set_dir), "genome": str(workdir / "genome.json"), "settings": asdict(settings),
                "base": str(ds.base_path), "fused": fused,
                "device": merge_device, "prepare": prepare, "delta_dtype": delta_dtype}
        loaded = self.llm.collective_rpc("hx_load", args=(json.loads(json.dumps(spec)),))[0]
        if "error" in loaded:
            self.close()
            raise HyperESError(loaded["error"])
        self.targets = loaded["targets"]
        self.last_fidelity = 0.0

    def set_genome(self, x) -> None:
        """Install candidate x; `last_timing` is the worker's split, `last_fidelity` its fidelity (as HFInPlace)."""
        self.last_timing = self.llm.collective_rpc("hx_apply", args=([float(v) for v in x],))[0]
        self.last_fidelity = self.last_timing["fidelity"]
        self.llm.reset_prefix_cache()  # stale KV of the old weights would otherwise be reused

    def restore(self) -> None:
        self.llm.collective_rpc("hx_restore")
        self.llm.reset_prefix_cache()
