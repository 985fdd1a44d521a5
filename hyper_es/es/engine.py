"""ES engines: a resident model whose θ lives in an fp32 master copy; `set_genome(Member(seed, scale))` installs
θ + scale·ε(seed) and `set_genome(None)` installs θ itself, exactly (from the master). So the search's `Scorer`
scores ES members unchanged, and the driver sends only seeds and scales."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from hyper_es.engine.hf import HFGenerator
from hyper_es.errors import HyperESError
from hyper_es.es.noise import perturbed
from hyper_es.es.update import apply_update


@dataclass(frozen=True)
class Member:
    seed: int
    scale: float  # ±σ (the mirror of an antithetic pair has −σ)


def es_tensors(names_shapes: dict[str, tuple[int, ...]], scope: str, layer_pattern: str, lora=None) -> list[str]:
    """The tensors ES writes: every checkpoint tensor (`full`), the 2-D weights inside the layers (`all_linear`),
    or the LoRA targets among those (`lora`, with `lora` a LoraShape)."""
    if scope == "full":
        return sorted(names_shapes)
    if scope == "all_linear":
        layer = re.compile(layer_pattern)
        return sorted(n for n, s in names_shapes.items() if len(s) == 2 and layer.search(n))
    if scope == "lora":
        from hyper_es.es.lora import lora_weights

        return lora_weights(names_shapes, lora, layer_pattern)
    raise HyperESError(f"es.scope: unknown scope '{scope}' (expected full, all_linear or lora)")


def add_start(master: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> None:
    """θ_0 = base + the start row's update (sequencing); the update must lie inside the ES tensors."""
    outside = sorted(set(start) - set(master))
    if outside:
        raise HyperESError(f"es.start: the start's update touches '{outside[0]}', outside es.scope; use scope: full "
                           f"or all_linear to cover it")
    for n, d in start.items():
        master[n] += d.to(master[n].device, torch.float32)


class HFES(HFGenerator):
    """HF backend: the written parameters are overwritten in place (θ + scale·ε, or with `lora` W₀ + s·B'A', cast to
    the model's dtype). `theta` is what ES updates: the fp32 master of the weights, or the LoRA factors."""

    def __init__(self, model, tokenizer, names: list[str], *, batch_size: int = 32, max_model_len: int | None = None,
                 start: dict[str, torch.Tensor] | None = None, lora=None, noise: str = "table"):
        super().__init__(model, tokenizer, batch_size=batch_size, max_model_len=max_model_len)
        params = dict(model.named_parameters())  # tied weights appear once
        missing = [n for n in names if n not in params]
        if missing:
            raise HyperESError(f"the model has no parameter '{missing[0]}'")
        self.params = {n: params[n] for n in names}
        self.master = {n: p.detach().to(torch.float32).clone() for n, p in self.params.items()}
        add_start(self.master, start or {})
        self.lora, self.noise = lora, noise
        if lora is not None:
            from hyper_es.es.lora import init_factors

            self.theta = init_factors({n: tuple(w.shape) for n, w in self.master.items()}, lora.r)
        else:
            self.theta = self.master
        self.set_genome(None)
        self.last_fidelity = 0.0

    def _installed(self, member: Member | None):
        if self.lora is not None:
            from hyper_es.es.lora import installed

            yield from installed(self.master, self.theta, self.lora.scaling,
                                 None if member is None else (member.seed, member.scale), self.noise)
            return
        yield from (self.master.items() if member is None
                    else perturbed(self.master, member.seed, member.scale, self.noise))

    @torch.no_grad()
    def set_genome(self, member: Member | None) -> None:
        for n, w in self._installed(member):
            self.params[n].copy_(w.to(self.params[n].dtype))

    def restore(self) -> None:
        self.set_genome(None)

    def update(self, seeds, z, sigma: float, alpha: float, signs) -> None:
        apply_update(self.theta, seeds, z, sigma, alpha, signs, kind=self.noise)
        self.set_genome(None)

    def weights(self) -> dict[str, torch.Tensor]:
        """θ's installed weights in fp32 (the master itself when ES is dense)."""
        return self.master if self.lora is None else dict(self._installed(None))


def es_engine(recipe, backend: str, start_file: Path | None = None):
    """(engine, tokenizer): a resident model of the recipe's base for ES, in the engine dtype of the recipe, its θ_0
    the base plus the update in `start_file` (safetensors) when ES is sequenced after another stage."""
    from hyper_es import architectures, models
    from hyper_es.engine import _check_backend, engine_dtype

    _check_backend(backend)
    dtype = engine_dtype(backend, recipe.eval.dtype, recipe.model.dtype)
    path = models.resolve(recipe.model.name, revision=recipe.model.revision)
    arch = architectures.for_model(path)
    lora = None
    if recipe.es.scope == "lora":
        from hyper_es.es.lora import LoraShape

        lora = LoraShape.from_recipe(recipe)
    if backend == "vllm":
        from transformers import AutoTokenizer

        from hyper_es.es.vllm_engine import VLLMES

        tok = AutoTokenizer.from_pretrained(path)
        return VLLMES(path, tok, architecture=arch.name, scope=recipe.es.scope, start=start_file, dtype=dtype,
                      max_model_len=recipe.model.max_model_len, seed=recipe.es.seed, lora=lora,
                      noise=recipe.es.noise), tok
    model, tok = models.load(str(path), dtype=dtype)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    start = None
    if start_file is not None:
        from safetensors.torch import load_file

        start = load_file(str(start_file))
    return HFES(model, tok, es_tensors(shapes, recipe.es.scope, arch.layer_pattern, lora),
                batch_size=recipe.eval.batch_size, max_model_len=recipe.model.max_model_len, start=start, lora=lora,
                noise=recipe.es.noise), tok
