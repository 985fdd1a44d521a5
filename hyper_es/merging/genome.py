"""The genome: the coefficient layout that search and merge share (layer groups × directions × module groups)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hyper_es import architectures
from hyper_es.architectures import MODULE_GROUPS, Architecture
from hyper_es.errors import DataError, HyperESError
from hyper_es.io import read_json

NON_LAYER = "non-layer"  # embeddings, final norm, lm_head


@dataclass(frozen=True)
class Genome:
    """Flat vector ↔ named coefficients. Keys are (layer group, direction, module group or "all")."""

    directions: tuple[str, ...]
    num_layers: int
    layer_group_size: int = 1
    module_groups: bool = False
    per_direction_density: bool = False
    per_layer_density: bool = False  # a DARE density per (layer group, direction), searched with the coefficients
    non_layer: bool = False  # a coefficient group for tensors outside the transformer layers
    bounds: tuple[float, float] = (-1.0, 2.0)
    density_bounds: tuple[float, float] = (0.05, 1.0)
    architecture: str = "llama"  # the family in hyper_es/architectures (tensor naming: layers, module groups)
    modules: tuple[str, ...] = MODULE_GROUPS  # module_groups: the groups with genes (those the directions touch)

    def __post_init__(self):
        if not self.directions or self.num_layers < 1 or self.layer_group_size < 1:
            raise HyperESError("a genome needs ≥1 direction, ≥1 layer and layer_group_size ≥ 1")
        if self.per_direction_density and self.per_layer_density:
            raise HyperESError("per_direction_density and per_layer_density: choose one density layout")
        if not self.modules or set(self.modules) - set(MODULE_GROUPS):
            raise HyperESError(f"modules: expected some of {', '.join(MODULE_GROUPS)}, got {list(self.modules)}")
        self.arch  # noqa: B018 - an unknown family fails here, with the table's error

    @property
    def arch(self) -> Architecture:
        return architectures.get(self.architecture)

    @classmethod
    def for_tensors(cls, directions: list[str], tensors: list[str], num_layers: int, architecture: str = "llama",
                    **kw) -> Genome:
        """A genome covering these tensors (adds the non-layer group only when such a tensor is merged)."""
        arch = architectures.get(architecture)
        non_layer = any(arch.layer_index(t) is None for t in tensors)
        return cls(tuple(directions), num_layers, non_layer=non_layer, architecture=architecture, **kw)

    # --- layout -----------------------------------------------------------------------------------------------
    @property
    def layer_groups(self) -> list[str]:
        n = math.ceil(self.num_layers / self.layer_group_size)
        groups = [self._group_name(i) for i in range(n)]
        return groups + ([NON_LAYER] if self.non_layer else [])

    def _group_name(self, i: int) -> str:
        lo, hi = i * self.layer_group_size, min(self.num_layers, (i + 1) * self.layer_group_size) - 1
        return f"L{lo}" if lo == hi else f"L{lo}-{hi}"

    @property
    def keys(self) -> list[tuple[str, str, str]]:
        return [(g, d, m) for g in self.layer_groups for d in self.directions for m in self.module_names]

    @property
    def module_names(self) -> tuple[str, ...]:
        return self.modules if self.module_groups else ("all",)

    @property
    def density_keys(self) -> list[tuple[str, str]]:
        """(layer group or "all", direction) of each density gene, after the coefficients in the vector."""
        if self.per_layer_density:
            return [(g, d) for g in self.layer_groups for d in self.directions]
        return [("all", d) for d in self.directions] if self.per_direction_density else []

    @property
    def size(self) -> int:
        return len(self.keys) + len(self.density_keys)

    def key_for(self, tensor: str, direction: str) -> tuple[str, str, str]:
        """Which coefficient scales `direction` on `tensor`."""
        arch = self.arch
        layer = arch.layer_index(tensor)
        if layer is None:
            if not self.non_layer:
                raise HyperESError(f"tensor '{tensor}' is outside the layers, but the genome has no non-layer group")
            group = NON_LAYER
        else:
            if layer >= self.num_layers:
                raise HyperESError(f"tensor '{tensor}' is in layer {layer}, but the genome has {self.num_layers}")
            group = self._group_name(layer // self.layer_group_size)
        return group, direction, arch.module_group(tensor) if self.module_groups else "all"

    # --- vectors ----------------------------------------------------------------------------------------------
    def check(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        if x.size != self.size:
            raise HyperESError(f"genome vector has {x.size} values, expected {self.size} "
                               f"({len(self.keys)} coefficients{' + densities' if self.density_keys else ''})")
        if not np.all(np.isfinite(x)):
            raise HyperESError(f"genome vector has non-finite values at positions {np.flatnonzero(~np.isfinite(x))[:5].tolist()}")
        if self.density_keys:
            dens = x[len(self.keys):]
            if np.any(dens <= 0) or np.any(dens > 1):
                raise HyperESError(f"densities must be in (0, 1], got {dens.tolist()}")
        return x

    def coefficients(self, x) -> dict[tuple[str, str, str], float]:
        x = self.check(x)
        return dict(zip(self.keys, x[: len(self.keys)].tolist()))

    def vector(self, named: dict[tuple[str, str, str], float], densities: dict | None = None) -> np.ndarray:
        """Named coefficients {(layer group, direction, module group): value} → flat vector (all keys required).
        `densities`: {direction: d} or {(layer group, direction): d}; a density not given is 1."""
        groups, mods = set(self.layer_groups), set(self.module_names)
        for g, d, m in named:
            if g not in groups:
                raise HyperESError(f"unknown layer group '{g}'; expected one of: {', '.join(self.layer_groups)}")
            if d not in self.directions:
                raise HyperESError(f"unknown direction '{d}'; expected one of: {', '.join(self.directions)}")
            if m not in mods:
                raise HyperESError(f"unknown module group '{m}'; expected one of: {', '.join(sorted(mods))}")
        missing = [k for k in self.keys if k not in named]
        if missing:
            raise HyperESError(f"{len(missing)} coefficients missing, first {'/'.join(missing[0])}")
        x = [named[k] for k in self.keys]
        dens = densities or {}
        x += [dens[(g, d)] if (g, d) in dens else dens.get(d, 1.0) for g, d in self.density_keys]
        return self.check(x)

    def densities(self, x, default: float) -> dict[str, float]:
        """One density per direction (`default` without density genes)."""
        if self.per_layer_density:
            raise HyperESError("this genome has a density per layer group; use layer_densities")
        x = self.check(x)
        if not self.per_direction_density:
            return dict.fromkeys(self.directions, default)
        return dict(zip(self.directions, x[len(self.keys):].tolist()))

    def layer_densities(self, x, default: float) -> dict[tuple[str, str], float]:
        """{(layer group, direction): density} for every layer group, whatever the density layout."""
        x = self.check(x)
        genes = dict(zip(self.density_keys, x[len(self.keys):].tolist()))
        return {(g, d): genes.get((g, d), genes.get(("all", d), default))
                for g in self.layer_groups for d in self.directions}

    def initial(self, kind: str | list[float] = "uniform", density: float = 1.0) -> np.ndarray:
        """x0: 'zeros' (the base), 'uniform' (1/K each), 'ones' (plain task arithmetic), or an explicit list."""
        if isinstance(kind, list):
            return self.check(kind)
        starts = {"zeros": 0.0, "uniform": 1.0 / len(self.directions), "ones": 1.0}
        if kind not in starts:
            raise HyperESError(f"unknown initial point '{kind}'; expected zeros, uniform, ones or a list")
        c = starts[kind]
        dens = [density] * len(self.density_keys)
        return np.array([c] * len(self.keys) + dens, dtype=np.float64)

    def lower_upper(self) -> tuple[np.ndarray, np.ndarray]:
        n, k = len(self.keys), len(self.density_keys)
        lo = [self.bounds[0]] * n + [self.density_bounds[0]] * k
        hi = [self.bounds[1]] * n + [self.density_bounds[1]] * k
        return np.array(lo), np.array(hi)

    def scaled(self, x, scale: float) -> np.ndarray:
        """x with every coefficient times `scale` (densities unchanged)."""
        x = self.check(x).copy()
        x[: len(self.keys)] *= scale
        return x

    def uniform(self, value: float) -> np.ndarray:
        """Every coefficient equal (densities at 1)."""
        return np.array([value] * len(self.keys) + [1.0] * len(self.density_keys), dtype=np.float64)

    # --- presentation -----------------------------------------------------------------------------------------
    def table(self, x) -> str:
        coef = self.coefficients(x)
        mods = self.module_names
        cols = [f"{d}/{m}" if self.module_groups else d for d in self.directions for m in mods]
        lines = ["group".ljust(10) + "".join(c.rjust(14) for c in cols)]
        for g in self.layer_groups:
            lines.append(g.ljust(10) + "".join(f"{coef[(g, d, m)]:14.4f}" for d in self.directions for m in mods))
        if self.per_direction_density:
            lines.append("density".ljust(10) + "".join(f"{v:14.4f}" for v in self.densities(x, 1.0).values()))
        if self.per_layer_density:
            dens = self.layer_densities(x, 1.0)
            lines += [f"dens {g}".ljust(10) + "".join(f"{dens[(g, d)]:14.4f}" for d in self.directions for _ in mods)
                      for g in self.layer_groups]
        return "\n".join(lines)

    def to_json(self, x=None) -> str:
        data = {"genome": {**asdict(self), "directions": list(self.directions)}}
        if not self.per_layer_density:  # genomes written before it existed read the same
            del data["genome"]["per_layer_density"]
        if self.modules == MODULE_GROUPS or not self.module_groups:  # genomes written before it read the same
            del data["genome"]["modules"]
        else:
            data["genome"]["modules"] = list(self.modules)
        if x is not None:
            data["values"] = {"/".join(k): v for k, v in self.coefficients(x).items()}
            if self.per_direction_density:
                data["densities"] = self.densities(x, 1.0)
            if self.per_layer_density:
                data["densities"] = {f"{g}/{d}": v for (g, d), v in self.layer_densities(x, 1.0).items()}
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str | Path,
                  fix: str = "re-run `hyper-es search` on the run folder to write it again") -> tuple[Genome, np.ndarray | None]:
        """From JSON text or a path to a JSON file; a damaged file raises DataError naming it and `fix`."""
        is_path = isinstance(text, Path) or not str(text).lstrip().startswith("{")
        data = read_json(Path(text), fix) if is_path else json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("genome"), dict):  # an unknown family: the table's error
            architectures.get(str(data["genome"].get("architecture", "llama")))
        try:
            g = data["genome"]
            genome = cls(**{**g, "directions": tuple(g["directions"]), "bounds": tuple(g["bounds"]),
                            "density_bounds": tuple(g["density_bounds"]),
                            "modules": tuple(g.get("modules", MODULE_GROUPS))})
            if "values" not in data:
                return genome, None
            named = {tuple(k.split("/")): v for k, v in data["values"].items()}
            dens = {(tuple(k.split("/")) if "/" in k else k): v for k, v in (data.get("densities") or {}).items()}
            return genome, genome.vector(named, dens)
        except (KeyError, TypeError, ValueError, AttributeError, HyperESError) as exc:
            what = text if is_path else "genome JSON"
            raise DataError(f"{what}: not a genome ({type(exc).__name__}: {str(exc)[:80]}); {fix}") from None
