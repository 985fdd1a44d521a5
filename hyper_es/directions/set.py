"""DirectionSet: K descent directions ΔW_k against one base model, validated and materialised lazily per tensor."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from hyper_es.directions.sources import (
    CheckpointDiff, Dense, Direction, LoraFactors, checkpoint_tensors, read_adapter, tensor_shapes,
)
from hyper_es.errors import DataError
from hyper_es.rundir import SET_TENSORS

SET_INDEX = "directions.json"


class DirectionSet:
    """Directions named in order; `delta(k, tensor)` gives ΔW in HF state_dict naming."""

    def __init__(self, base: str | Path, directions: list[Direction], *, validate: bool = True):
        from hyper_es import models

        if not directions:
            raise DataError("a DirectionSet needs at least one direction")
        names = [d.name for d in directions]
        if len(set(names)) != len(names):
            raise DataError(f"direction names must be unique, got {names}")
        self.base = str(base)
        self.base_path = models.resolve(self.base)
        self.directions = directions
        if validate:
            self.validate()

    # --- construction ------------------------------------------------------------------------------------------
    @classmethod
    def from_adapters(cls, base: str | Path, adapters: list[str | Path], names: list[str] | None = None):
        """From PEFT LoRA adapter folders."""
        if isinstance(adapters, (str, Path)):
            raise DataError(f"adapters: expected a list of PEFT adapter folders, got one path ({adapters}); "
                            f"write adapters=[{str(adapters)!r}]")
        names = names or [None] * len(adapters)
        if len(names) != len(adapters):
            raise DataError(f"names: {len(names)} given for {len(adapters)} adapters; expected one per adapter")
        return cls(base, [read_adapter(Path(a), n) for a, n in zip(adapters, names, strict=True)])

    @classmethod
    def from_checkpoints(cls, base: str | Path, checkpoints: list[str | Path], names: list[str] | None = None):
        """From full fine-tuned save_pretrained folders: ΔW = θ_k − θ_0 for every tensor they share with the base."""
        from hyper_es import models

        base_files = checkpoint_tensors(models.resolve(str(base)))
        dirs = []
        for ckpt, name in zip(checkpoints, names or [None] * len(checkpoints), strict=True):
            ckpt = Path(ckpt)
            if not ckpt.is_dir():
                raise DataError(f"checkpoint {ckpt}: no such folder")
            files, shapes = checkpoint_tensors(ckpt), tensor_shapes(ckpt)
            parts = {t: CheckpointDiff(files[t], base_files[t], t, shapes[t]) for t in sorted(files) if t in base_files}
            extra = sorted(set(files) - set(base_files))
            if extra:
                raise DataError(f"direction '{name or ckpt.name}' ({ckpt}): tensor '{extra[0]}' is not in the base model")
            dirs.append(Direction(name or ckpt.name, parts, origin=str(ckpt)))  # shapes: checked in validate()
        return cls(base, dirs)

    @classmethod
    def from_dicts(cls, base: str | Path, deltas: dict[str, dict[str, torch.Tensor]]):
        """From in-memory {direction name: {tensor name: ΔW}}."""
        return cls(base, [Direction(n, {t: Dense(v) for t, v in d.items()}, origin="memory") for n, d in deltas.items()])

    @classmethod
    def from_run(cls, run_dir: str | Path, *, include_baseline: bool = False):
        """From a run directory's finished `directions/<name>/` jobs (manifest present), in name order."""
        from hyper_es.directions.manifest import finished_jobs

        jobs = finished_jobs(Path(run_dir), include_baseline=include_baseline)
        if not jobs:
            raise DataError(f"{run_dir}: no finished directions under directions/; run `hyper-es collect` on it first, "
                            f"or name existing adapters in the recipe's directions: section (docs/recipes.md)")
        bases = {m["base"]["name"] for _, m in jobs}
        if len(bases) != 1:
            raise DataError(f"{run_dir}: directions were trained on different bases: {sorted(bases)}")
        dirs = []
        for folder, manifest in jobs:
            d = load_direction(folder, manifest["name"])
            d.meta.update(base_hash=manifest["base"]["sha256"], manifest=manifest)
            dirs.append(d)
        return cls(bases.pop(), dirs)

    # --- access ------------------------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [d.name for d in self.directions]

    def __len__(self) -> int:
        return len(self.directions)

    def __getitem__(self, key: int | str) -> Direction:
        return self.directions[self._index(key)]

    def _index(self, key: int | str) -> int:
        if isinstance(key, str):
            if key not in self.names:
                raise KeyError(f"unknown direction '{key}'; expected one of: {', '.join(self.names)}")
            return self.names.index(key)
        return key

    @cached_property
    def base_shapes(self) -> dict[str, tuple[int, ...]]:
        return tensor_shapes(self.base_path)

    @cached_property
    def base_hash(self) -> str:
        from hyper_es.models.identity import weights_hash

        return weights_hash(self.base_path)

    def tensor_names(self) -> list[str]:
        """Every base tensor that at least one direction changes, in base order."""
        touched = {t for d in self.directions for t in d.parts}
        return [t for t in self.base_shapes if t in touched]

    def delta(self, k: int | str, tensor: str, dtype: torch.dtype = torch.float32, device="cpu") -> torch.Tensor:
        """ΔW of direction k for one tensor (zeros where the direction leaves the tensor alone)."""
        d = self[k]
        if tensor in d.parts:
            return d.delta(tensor, dtype, device)
        if tensor not in self.base_shapes:
            raise KeyError(f"tensor '{tensor}' is not in the base model {self.base}")
        return torch.zeros(self.base_shapes[tensor], dtype=dtype, device=device)

    # --- checks ------------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Every direction's tensors exist in the base with the same shapes, and its recorded base matches."""
        for d in self.directions:
            where = f"direction '{d.name}' ({d.origin})"
            want = d.meta.get("base_hash")
            if want and want != self.base_hash:
                raise DataError(f"{where}: trained on a base with weights sha256 {want[:12]}…, "
                                f"but this set's base {self.base} has {self.base_hash[:12]}…")
            for t, part in d.parts.items():
                if t not in self.base_shapes:
                    raise DataError(f"{where}: tensor '{t}' is not in the base model {self.base}")
                if tuple(part.shape) != self.base_shapes[t]:
                    raise DataError(f"{where}: tensor '{t}' has shape {list(part.shape)} but the base has "
                                    f"{list(self.base_shapes[t])}")

    def zero_directions(self) -> list[str]:
        """Names of the directions whose ΔW is exactly 0 in every tensor (a LoRA with A or B all zero, e.g. a job
        whose rewards never varied, so GRPO's advantages were 0): their coefficients cannot change the model."""
        return [d.name for d in self.directions if d.is_zero()]

    def geometry(self) -> dict:
        from hyper_es.directions.geometry import geometry

        return geometry(self)

    # --- persistence -------------------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write the set (LoRA factors kept as factors, other deltas as fp32 tensors) to a folder."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors, index = {}, {"base": self.base, "directions": []}
        for k, d in enumerate(self.directions):
            entry = {"name": d.name, "origin": d.origin, "meta": _jsonable(d.meta), "parts": {}}
            for t, part in d.parts.items():
                if isinstance(part, LoraFactors):
                    tensors[f"{k}/{t}/A"], tensors[f"{k}/{t}/B"] = part.A.contiguous(), part.B.contiguous()
                    entry["parts"][t] = {"kind": "lora", "scale": part.scale}
                else:
                    tensors[f"{k}/{t}/dense"] = part.delta(torch.float32, "cpu").contiguous()
                    entry["parts"][t] = {"kind": "dense"}
            index["directions"].append(entry)
        save_file(tensors, str(folder / SET_TENSORS))
        (folder / SET_INDEX).write_text(json.dumps(index, indent=1))
        return folder

    @classmethod
    def load(cls, folder: str | Path, *, validate: bool = True) -> DirectionSet:
        folder = Path(folder)
        if not (folder / SET_INDEX).is_file():
            raise DataError(f"{folder}: not a saved DirectionSet (no {SET_INDEX})")
        index = json.loads((folder / SET_INDEX).read_text())
        tensors = load_file(str(folder / SET_TENSORS))
        dirs = []
        for k, entry in enumerate(index["directions"]):
            parts = {}
            for t, p in entry["parts"].items():
                parts[t] = (LoraFactors(tensors[f"{k}/{t}/A"], tensors[f"{k}/{t}/B"], p["scale"])
                            if p["kind"] == "lora" else Dense(tensors[f"{k}/{t}/dense"]))
            dirs.append(Direction(entry["name"], parts, origin=entry["origin"], meta=entry["meta"]))
        return cls(index["base"], dirs, validate=validate)


def adapter_delta(base: str | Path, folder: str | Path, name: str) -> dict:
    """{tensor: ΔW} of one PEFT adapter folder on `base` (its B·A·alpha/r per tensor, fp32)."""
    ds = DirectionSet.from_adapters(base, [folder], [name])
    return {t: ds.delta(0, t).float() for t in ds[0].parts}


def load_direction(folder: Path, name: str) -> Direction:
    """One direction stored in a run folder: a PEFT adapter (a trained job, an imported adapter) or a one-direction
    saved set (imported from a DirectionSet)."""
    folder = Path(folder)
    if (folder / SET_INDEX).is_file():
        d = DirectionSet.load(folder, validate=False).directions[0]
        return Direction(name, d.parts, origin=d.origin, meta=dict(d.meta))
    return read_adapter(folder, name)


def _jsonable(meta: dict) -> dict:
    return json.loads(json.dumps(meta, default=str))
