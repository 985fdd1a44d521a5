"""HF resident engine: one model whose written weights are rewritten in place per candidate, from a weight source.

The source's fp32 master is taken from the model's own weights (upcast), so every candidate is made from the exact
base (or θ), and `restore()` puts the source's resting weights back exactly. `last_fidelity` is the last
candidate's ‖installed − intended‖ / ‖intended‖ (engine/fidelity.py) where the source gives an intended ΔW (a
merge): 0 in fp32; in bf16, how much rounding replaced the update. (A bf16 model's master is its bf16 weights
upcast, so it merges from the rounded base; the vLLM worker merges from the fp32 checkpoint.)
"""

from __future__ import annotations

import torch

from hyper_es.engine.fidelity import Fidelity
from hyper_es.engine.hf import HFGenerator
from hyper_es.errors import DataError


class HFResident(HFGenerator):
    def __init__(self, model, tokenizer, source, *, batch_size: int = 32, max_model_len: int | None = None):
        super().__init__(model, tokenizer, batch_size=batch_size, max_model_len=max_model_len)
        self.source = source
        params = dict(model.named_parameters())  # tied weights appear once
        params.update({k: v for k, v in model.state_dict(keep_vars=True).items() if k not in params})
        missing = [t for t in source.names if t not in params]
        if missing:
            raise DataError(f"model has no parameter '{missing[0]}' (the candidates do not fit this model)")
        self.params = {t: params[t] for t in source.names}
        source.bind({t: p.detach().to(torch.float32).clone() for t, p in self.params.items()})
        self.last_fidelity = 0.0
        self.set_genome(None)

    @torch.no_grad()
    def set_genome(self, genome) -> None:
        """Install the source's weights for `genome` (None: its resting weights: the base, or θ)."""
        fid = Fidelity()
        for t, w, delta in self.source.weights(genome):
            p = self.params[t]
            stored = w.to(p.dtype)
            p.copy_(stored)
            if delta is not None:
                fid.add(stored, self.source.master[t], delta)
        self.last_fidelity = fid.value

    def restore(self) -> None:
        self.set_genome(None)

    def update(self, *args) -> None:
        """An ES step on θ (seeds, z, σ, α, signs), then θ installed."""
        self.source.update(*args)
        self.set_genome(None)

    def weights(self) -> dict[str, torch.Tensor]:
        """The resting weights in fp32 (the master's own tensors for a merge and dense ES; θ's installed weights for
        LoRA-scope ES)."""
        return {t: w for t, w, _ in self.source.weights(None)}
