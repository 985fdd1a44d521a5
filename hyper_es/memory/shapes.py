"""A decoder's tensor shapes from its config.json (Llama/Qwen2 families): what the memory plan counts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hyper_es.errors import HyperESError

CONFIGS = Path(__file__).with_name("configs")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GIB = 1 << 30


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool

    @classmethod
    def from_config(cls, cfg: dict, where: str = "config.json") -> ModelShape:
        cfg = {**(cfg.get("text_config") or {}), **cfg}
        try:
            heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            return cls(hidden, int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"]), heads,
                       int(cfg.get("num_key_value_heads") or heads), int(cfg.get("head_dim") or hidden // heads),
                       int(cfg["vocab_size"]), bool(cfg.get("tie_word_embeddings", False)),
                       cfg.get("model_type") == "qwen2")
        except (KeyError, TypeError, ValueError) as exc:
            raise HyperESError(f"{where}: no usable {exc} for the memory plan; expected a Llama/Qwen2-style decoder "
                               f"config (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
                               f"vocab_size)") from None

    def projection(self, name: str) -> tuple[int, int]:
        """(out, in) of one layer's projection."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (q, self.hidden), "k_proj": (kv, self.hidden), "v_proj": (kv, self.hidden),
                "o_proj": (self.hidden, q), "gate_proj": (self.intermediate, self.hidden),
                "up_proj": (self.intermediate, self.hidden), "down_proj": (self.hidden, self.intermediate)}[name]

    def numel(self, targets=PROJECTIONS) -> int:
        """Entries of the named projections over every layer."""
        return self.layers * sum(o * i for o, i in map(self.projection, targets))

    def lora_params(self, r: int, targets=PROJECTIONS) -> int:
        """A LoRA of rank r on the named projections of every layer: r·(in + out) each."""
        return self.layers * r * sum(o + i for o, i in map(self.projection, targets))

    @property
    def params(self) -> int:
        kv = self.kv_heads * self.head_dim
        per_layer = self.numel() // self.layers + 2 * self.hidden + (self.heads * self.head_dim + 2 * kv) * self.qkv_bias
        return self.layers * per_layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def shipped_config(name: str) -> Path | None:
    """The shipped config.json of a hub id (configs/<org>--<name>.json), if there is one."""
    path = CONFIGS / f"{name.replace('/', '--')}.json"
    return path if path.is_file() else None


def model_config(name: str, *, revision: str | None = None, resolve: bool = True) -> tuple[dict, str]:
    """(config, where it came from): the shipped config of a hub id, else (with `resolve`) the model's own."""
    shipped = shipped_config(name)
    if shipped is not None:
        return json.loads(shipped.read_text()), f"{shipped.name} (shipped)"
    if not resolve:
        raise HyperESError(f"model.name: no shipped config for '{name}' (shipped: "
                           f"{', '.join(sorted(p.stem.replace('--', '/') for p in CONFIGS.glob('*.json')))}); "
                           f"drop --no-resolve to read the model's own config.json")
    from hyper_es import architectures, models

    path = models.resolve(name, revision=revision)
    return architectures.load_config(path), f"{path}/config.json"
