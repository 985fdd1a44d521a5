"""Architecture knowledge as data: one JSON file per model family in this folder (as mergekit keeps its own).

The family's name is the file's stem (a Genome records it). A file holds exactly these keys:
- `architectures`: HF `config.json` `architectures` names it covers (vLLM's model classes bear the same names);
- `num_layers_keys`: config keys for the number of layers, first present wins (also looked up in `text_config`);
- `layer_pattern`: a regex whose one group is a tensor's layer index (no match: the tensor is outside the layers);
- `layer_prefix`: the tensor-name prefix of layer `{i}`;
- `module_groups`: {"attention" | "mlp": regex}; a layer tensor matching neither is in group "other";
- `mergekit_filters`: {module group: the substring mergekit's `filter` matches}, one per module group;
- `vllm_fusions`: {vLLM fused module: [HF projections stacked into it along dim 0, in order]};
- `vllm_transposed`: HF modules whose `.weight` vLLM stores transposed (GPT-2's Conv1D).
Adding a family is adding a file. `$HYPER_ES_ARCHITECTURES` names a folder to read instead of this one.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from hyper_es.errors import HyperESError

MODULE_GROUPS = ("attention", "mlp", "other")
KEYS = ("architectures", "num_layers_keys", "layer_pattern", "layer_prefix", "module_groups", "mergekit_filters",
        "vllm_fusions", "vllm_transposed")


@dataclass(frozen=True)
class Architecture:
    name: str
    architectures: tuple[str, ...]
    num_layers_keys: tuple[str, ...]
    layer_pattern: str
    layer_prefix_template: str
    module_patterns: tuple[tuple[str, str], ...]  # (group, regex), tried in order
    mergekit_filters: tuple[tuple[str, str], ...]  # (group, substring)
    vllm_fusions: tuple[tuple[str, tuple[str, ...]], ...]  # (fused module, HF projections)
    vllm_transposed: tuple[str, ...] = ()

    @cached_property
    def _layer(self) -> re.Pattern:
        return re.compile(self.layer_pattern)

    @cached_property
    def _groups(self) -> list[tuple[str, re.Pattern]]:
        return [(g, re.compile(p)) for g, p in self.module_patterns]

    @cached_property
    def _fused(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        return {proj: (fused, projs) for fused, projs in self.vllm_fusions for proj in projs}

    def layer_index(self, tensor: str) -> int | None:
        m = self._layer.search(tensor)
        return int(m.group(1)) if m else None

    def module_group(self, tensor: str) -> str:
        return next((g for g, p in self._groups if p.search(tensor)), "other")

    def layer_prefix(self, i: int) -> str:
        return self.layer_prefix_template.format(i=i)

    def num_layers(self, config: dict) -> int:
        for cfg in (config, config.get("text_config") or {}):
            for key in self.num_layers_keys:
                if cfg.get(key):
                    return int(cfg[key])
        raise HyperESError(f"the model's config.json has none of {', '.join(self.num_layers_keys)} (the layer count "
                           f"of {self.name}.json)")

    def mergekit_filter(self, group: str) -> str | None:
        return dict(self.mergekit_filters).get(group)

    def vllm_target(self, hf_name: str) -> tuple[str, tuple[str, ...] | None]:
        """HF tensor → (vLLM fused module, the HF weights stacked into it in order), or (hf_name, None) if unfused.
        A fused projection's bias maps to the fused module's bias parameter, its parts' biases stacked in order."""
        module, _, leaf = hf_name.rpartition(".")
        parent, _, proj = module.rpartition(".")
        if leaf not in ("weight", "bias") or proj not in self._fused:
            return hf_name, None
        fused, projs = self._fused[proj]
        target = f"{parent}.{fused}" + (".bias" if leaf == "bias" else "")
        return target, tuple(f"{parent}.{p}.{leaf}" for p in projs)

    def vllm_is_transposed(self, hf_name: str) -> bool:
        module, _, leaf = hf_name.rpartition(".")
        return leaf == "weight" and module.rpartition(".")[2] in self.vllm_transposed


def folder() -> Path:
    return Path(os.environ.get("HYPER_ES_ARCHITECTURES") or Path(__file__).parent)


_CACHE: dict[str, dict[str, Architecture]] = {}


def table() -> dict[str, Architecture]:
    """Every family in the table folder, by name (loaded and checked once per folder)."""
    where = folder()
    key = str(where)
    if key not in _CACHE:
        archs = {p.stem: _parse(p) for p in sorted(where.glob("*.json"))}
        seen: dict[str, str] = {}
        for a in archs.values():
            for n in a.architectures:
                if n in seen:
                    raise HyperESError(f"{where}: architecture '{n}' is in both {seen[n]}.json and {a.name}.json")
                seen[n] = a.name
        _CACHE[key] = archs
    return _CACHE[key]


def get(name: str) -> Architecture:
    """A family by name (its file's stem)."""
    archs = table()
    if name not in archs:
        raise HyperESError(f"unknown architecture family '{name}': no {name}.json in {folder()}; add a JSON file "
                           f"there (like llama.json)")
    return archs[name]


def for_name(arch: str) -> Architecture:
    """The family covering an HF architecture (or vLLM model class) name."""
    for a in table().values():
        if arch in a.architectures:
            return a
    raise HyperESError(f"unknown architecture '{arch}': no JSON file in {folder()} lists it; add one there "
                       f"(like llama.json) to support it")


def load_config(base: str | Path | dict) -> dict:
    if isinstance(base, dict):
        return base
    path = Path(base)
    path = path / "config.json" if path.is_dir() else path
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HyperESError(f"cannot read the model config {path}: {exc}") from exc


def for_model(base: str | Path | dict) -> Architecture:
    """The family of a model folder, its config.json, or a config dict (`architectures`, else `text_config`'s)."""
    cfg = load_config(base)
    names = list(cfg.get("architectures") or []) + list((cfg.get("text_config") or {}).get("architectures") or [])
    if not names:
        where = "" if isinstance(base, dict) else f" of {base}"
        raise HyperESError(f"the model config{where} names no architectures")
    known = {n for a in table().values() for n in a.architectures}
    return for_name(next((n for n in names if n in known), names[0]))


def _parse(path: Path) -> Architecture:
    def bad(msg: str) -> HyperESError:
        return HyperESError(f"architecture file {path}: {msg}")

    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise bad(f"not valid JSON ({exc})") from exc
    if not isinstance(d, dict) or set(d) != set(KEYS):
        got = set(d) if isinstance(d, dict) else set()
        raise bad(f"expected exactly the keys {', '.join(KEYS)}; missing {sorted(set(KEYS) - got)}, "
                  f"unknown {sorted(got - set(KEYS))}")
    strs = lambda v: isinstance(v, list) and all(isinstance(s, str) and s for s in v)  # noqa: E731
    if not all(strs(d[k]) and d[k] for k in ("architectures", "num_layers_keys")):
        raise bad("'architectures' and 'num_layers_keys' must be non-empty lists of names")
    if not strs(d["vllm_transposed"]):
        raise bad("'vllm_transposed' must be a list of module names")
    groups, filters, fusions = d["module_groups"], d["mergekit_filters"], d["vllm_fusions"]
    if not isinstance(groups, dict) or not set(groups) <= {"attention", "mlp"}:
        raise bad(f"'module_groups' maps 'attention' and/or 'mlp' to a regex, got {groups!r}")
    if not isinstance(filters, dict) or set(filters) != set(groups) or not all(isinstance(v, str) and v
                                                                               for v in filters.values()):
        raise bad(f"'mergekit_filters' needs one substring per module group ({', '.join(groups)}), got {filters!r}")
    if not isinstance(fusions, dict) or not all(strs(v) and v for v in fusions.values()):
        raise bad(f"'vllm_fusions' maps a fused module to a non-empty list of HF projections, got {fusions!r}")
    try:
        compiled = [re.compile(p) for p in [d["layer_pattern"], *groups.values()]]
    except (re.error, TypeError) as exc:
        raise bad(f"bad regex ({exc})") from exc
    if compiled[0].groups != 1:
        raise bad(f"'layer_pattern' needs exactly one group (the layer index), got {d['layer_pattern']!r}")
    arch = Architecture(path.stem, tuple(d["architectures"]), tuple(d["num_layers_keys"]), d["layer_pattern"],
                        str(d["layer_prefix"]), tuple(groups.items()), tuple(filters.items()),
                        tuple((k, tuple(v)) for k, v in fusions.items()), tuple(d["vllm_transposed"]))
    for i in (0, 7, 12):
        try:
            got = arch.layer_index(arch.layer_prefix(i) + "x.weight")
        except (KeyError, IndexError, ValueError) as exc:
            raise bad(f"'layer_prefix' must be a template with {{i}}, got {d['layer_prefix']!r}") from exc
        if got != i:
            raise bad(f"'layer_pattern' finds layer {got} in '{arch.layer_prefix(i)}', expected {i}")
    return arch
