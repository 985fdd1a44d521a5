"""Where a direction's ΔW comes from: LoRA factors (scale·B·A) or dense deltas, materialised lazily per tensor."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from hyper_es.errors import DataError
from hyper_es.io import read_json
from hyper_es.rundir import ADAPTER_CONFIG, ADAPTER_WEIGHTS, MANIFEST_FILE

_PEFT_PREFIX = "base_model.model."


@dataclass
class LoraFactors:
    """ΔW = scale · B @ A for one HF weight tensor."""

    A: torch.Tensor
    B: torch.Tensor
    scale: float

    def delta(self, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
        a, b = self.A.to(device, torch.float32), self.B.to(device, torch.float32)
        return (self.scale * (b @ a)).to(dtype)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.B.shape[0], self.A.shape[1])


@dataclass
class Dense:
    """An explicit ΔW tensor (in memory)."""

    value: torch.Tensor

    def delta(self, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
        return self.value.to(device=device, dtype=dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)


@dataclass
class CheckpointDiff:
    """ΔW = θ_k − θ_0 for one tensor, read from two safetensors files when asked for."""

    tuned: Path
    base: Path
    tensor: str
    shape: tuple[int, ...]

    def delta(self, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
        diff = read_tensor(self.tuned, self.tensor).float() - read_tensor(self.base, self.tensor).float()
        return diff.to(device=device, dtype=dtype)


Part = LoraFactors | Dense | CheckpointDiff


@dataclass
class Direction:
    """One direction: a name, its per-tensor parts, and where it came from."""

    name: str
    parts: dict[str, Part]
    origin: str = ""
    meta: dict = field(default_factory=dict)

    def delta(self, tensor: str, dtype: torch.dtype = torch.float32, device="cpu") -> torch.Tensor:
        return self.parts[tensor].delta(dtype, device)

    def is_zero(self) -> bool:
        """ΔW is exactly 0 in every tensor (LoRA: A or B all zero; a checkpoint difference is read to tell)."""
        for t, part in self.parts.items():
            if isinstance(part, LoraFactors):
                if part.A.any() and part.B.any():
                    return False
            elif self.delta(t).any():
                return False
        return True


def _pattern_value(module: str, patterns: dict[str, float], default: float) -> float:
    """PEFT's rank_pattern / alpha_pattern: a key matches a module name by full-suffix regex."""
    for pat, value in patterns.items():
        if re.match(rf"(.*\.)?({pat})$", module):
            return value
    return default


def read_adapter(folder: Path, name: str | None = None) -> Direction:
    """A PEFT LoRA adapter folder → Direction with factors keyed by HF state_dict names."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"adapter {folder}: no such folder")
    cfg_path, w_path = folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS
    if not cfg_path.is_file() or not w_path.is_file():
        raise DataError(f"adapter {folder}: not a PEFT adapter folder (expected {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})")
    # A run's direction (it has a manifest) is retrained by deleting it; another adapter must be saved again.
    fix = (f"delete the folder {folder.name} to redo this job" if (folder / MANIFEST_FILE).is_file()
           else "save the adapter again (PEFT save_pretrained)")
    cfg = read_json(cfg_path, fix)
    if not isinstance(cfg, dict):
        raise DataError(f"{cfg_path}: expected a JSON object (a PEFT adapter config); {fix}")
    if cfg.get("peft_type") != "LORA":
        raise DataError(f"adapter {folder}: peft_type is {cfg.get('peft_type')!r}; only LORA adapters are supported")
    if cfg.get("use_dora"):
        raise DataError(f"adapter {folder}: DoRA adapters are not supported (ΔW is not scale·B·A)")
    if not all(isinstance(cfg.get(k), (int, float)) for k in ("r", "lora_alpha")):
        raise DataError(f"{cfg_path}: a LoRA config needs numbers 'r' and 'lora_alpha'; {fix}")
    r, alpha = cfg["r"], cfg["lora_alpha"]
    rslora = bool(cfg.get("use_rslora"))
    ranks, alphas = cfg.get("rank_pattern") or {}, cfg.get("alpha_pattern") or {}
    factors: dict[str, dict[str, torch.Tensor]] = {}
    try:
        with safe_open(str(w_path), "pt") as f:
            for key in f.keys():
                m = re.fullmatch(r"(.+)\.lora_([AB])(?:\.default)?\.weight", key)
                if not m:
                    if "lora_magnitude_vector" in key:
                        raise DataError(f"adapter {folder}: DoRA adapters are not supported")
                    continue  # biases, modules_to_save etc. are not part of ΔW = scale·B·A
                module = m.group(1).removeprefix(_PEFT_PREFIX)
                factors.setdefault(module, {})[m.group(2)] = f.get_tensor(key)
    except (SafetensorError, OSError) as exc:  # truncated or overwritten
        raise DataError(f"{w_path}: damaged safetensors file ({exc}); {fix}") from None
    if not factors:
        raise DataError(f"adapter {folder}: {ADAPTER_WEIGHTS} holds no lora_A/lora_B tensors")
    parts: dict[str, Part] = {}
    for module, ab in sorted(factors.items()):
        if set(ab) != {"A", "B"}:
            raise DataError(f"adapter {folder}: module '{module}' lacks lora_{'B' if 'A' in ab else 'A'}")
        rank = _pattern_value(module, ranks, r)
        if ab["A"].ndim != 2 or ab["B"].ndim != 2 or not ab["A"].shape[0] == ab["B"].shape[1] == rank:
            raise DataError(f"adapter {folder}: module '{module}' has lora_A {tuple(ab['A'].shape)} and lora_B "
                            f"{tuple(ab['B'].shape)}, but {ADAPTER_CONFIG} gives it rank {rank} (its scale "
                            f"alpha/r would be wrong); {fix}")
        a = _pattern_value(module, alphas, alpha)
        scale = a / (rank**0.5) if rslora else a / rank
        if cfg.get("fan_in_fan_out"):
            raise DataError(f"adapter {folder}: fan_in_fan_out adapters (Conv1D models) are not supported")
        parts[f"{module}.weight"] = LoraFactors(ab["A"], ab["B"], float(scale))
    return Direction(name or folder.name, parts, origin=str(folder), meta={"base": cfg.get("base_model_name_or_path")})


def checkpoint_tensors(folder: Path) -> dict[str, Path]:
    """Tensor name → safetensors file, for a save_pretrained folder (sharded or not)."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        data = read_json(index, "save the checkpoint again")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict):
            raise DataError(f"{index}: no weight_map; save the checkpoint again")
        return {k: folder / v for k, v in weight_map.items()}
    single = folder / "model.safetensors"
    if not single.is_file():
        raise DataError(f"checkpoint {folder}: no model.safetensors (or index); expected a save_pretrained folder")
    with _damaged_is_data_error(single), safe_open(str(single), "pt") as f:
        return {k: single for k in f.keys()}


@contextmanager
def _damaged_is_data_error(path: Path):
    try:
        yield
    except SafetensorError as exc:  # truncated or overwritten
        raise DataError(f"{path}: damaged safetensors file ({exc}); save the checkpoint again") from None


def read_tensor(path: Path, name: str) -> torch.Tensor:
    with _damaged_is_data_error(path), safe_open(str(path), "pt") as f:
        return f.get_tensor(name)


def tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Shapes of every tensor in a checkpoint, read from safetensors headers (no weights loaded)."""
    shapes = {}
    for name, path in checkpoint_tensors(folder).items():
        with _damaged_is_data_error(path), safe_open(str(path), "pt") as f:
            shapes[name] = tuple(f.get_slice(name).get_shape())
    return shapes
