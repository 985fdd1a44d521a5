"""HF backend for the search: one resident model whose touched weights are rewritten in place per candidate.

An fp32 master copy of the touched base tensors is kept, so every candidate is merged from the exact base, and
`restore()` puts the exact base weights back. `last_fidelity` is the last candidate's ‖installed − intended‖ /
‖intended‖ (engine/fidelity.py): 0 in fp32; in bf16, how much rounding replaced the update. (A bf16 model's master
is its bf16 weights upcast, so it merges from the rounded base; the vLLM worker merges from the fp32 checkpoint.)
"""

from __future__ import annotations

import torch

from hyper_es.engine.fidelity import Fidelity
from hyper_es.engine.hf import HFGenerator
from hyper_es.errors import DataError
from hyper_es.merging import MergePlan


class HFInPlace(HFGenerator):
    def __init__(self, model, tokenizer, plan: MergePlan, *, batch_size: int = 32, max_model_len: int | None = None):
        super().__init__(model, tokenizer, batch_size=batch_size, max_model_len=max_model_len)
        self.plan = plan
        self.params = model.state_dict(keep_vars=True)
        missing = [t for t in plan.tensors if t not in self.params]
        if missing:
            raise DataError(f"model has no parameter '{missing[0]}' (the directions do not fit this model)")
        self.master = {t: self.params[t].detach().to(torch.float32).clone() for t in plan.tensors}
        plan.warm_up()
        self.last_fidelity = 0.0

    @torch.no_grad()
    def set_genome(self, x) -> None:
        fid = Fidelity()
        for t, delta in self.plan.deltas(x):
            p, master = self.params[t], self.master[t]
            delta = delta.to(master.device)
            stored = (master + delta).to(p.dtype)
            p.copy_(stored)
            fid.add(stored, master, delta, base=master)  # the master is the model's own base weight, upcast
        self.last_fidelity = fid.value

    @torch.no_grad()
    def restore(self) -> None:
        for t, w in self.master.items():
            self.params[t].copy_(w.to(self.params[t].dtype))
