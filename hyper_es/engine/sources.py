"""Weight sources: what a resident engine installs for a candidate. Two kinds of candidate, one interface.

- `MergeSource`: a coefficient vector x → base + the merge plan's ΔW(x) (merging/), from the fp32 base master.
- `ESSource`: an ES member (seed, scale) → θ + scale·ε(seed), or θ itself for None; `update` takes an ES step.
  θ is the fp32 master (`all_linear`, `full`) or LoRA factors (`scope: lora`), on top of a sequenced start.

A source yields (tensor name, fp32 weight, intended ΔW or None) for a genome; the engine casts each weight to its
dtype, writes it, and measures fidelity where a ΔW is given. The numerics (noise, updates, LoRA factors) are
es/'s and merging/'s plain functions. `MergeWeights` and `ESWeights` are the recipes for a source: plain data that
builds it in this process (HF) or travels to the vLLM worker as a dict and builds it there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from hyper_es.errors import HyperESError
from hyper_es.es.member import Member
from hyper_es.rundir import DIRECTIONS_DIR

Weights = Iterator[tuple[str, torch.Tensor, "torch.Tensor | None"]]
Factors = Iterator[tuple[str, torch.Tensor, torch.Tensor]]  # (tensor, A, B): the update B·A, as a LoRA candidate


class MergeSource:
    timing_key = "merge_s"

    def __init__(self, plan):
        self.plan = plan
        self.names = list(plan.tensors)
        self.master: dict[str, torch.Tensor] = {}
        self._low_rank = None

    def bind(self, master: dict[str, torch.Tensor], *, device=None, shapes=None, base=None) -> dict:
        """The fp32 base weights of (at least) `names`; compiles a fused plan now, not inside a timed candidate.
        An empty master (LoRA candidates: `factors` only) is bound on `device`. Returns the weights to install once
        beside the checkpoint's (none for a merge)."""
        self.master, self.device = master, device if device is not None else _device(master)
        if master:
            self.plan.warm_up()
        return {}

    def weights(self, x) -> Weights:
        """base + ΔW(x) for every planned tensor; x None: the base itself."""
        if x is None:
            yield from ((t, self.master[t], None) for t in self.names)
            return
        for t, d in self.plan.deltas(x):
            d = d.float()
            master = self.master[t]
            d = d.to(master.device)
            yield t, master + d, d

    def factors(self, x) -> Factors:
        """Candidate x as one LoRA, (tensor, A, B) with B·A = ΔW(x) (a linear merge of LoRA directions only); x None:
        no update. The stacked A is built on first use, on the master's device."""
        if x is None:
            return
        if self._low_rank is None:
            from hyper_es.merging.low_rank import LowRankPlan

            self._low_rank = LowRankPlan(self.plan, self.device)
        yield from self._low_rank.factors(x)

    def update(self, *args) -> None:
        raise HyperESError("a merge source takes no ES update")

    @staticmethod
    def decode(payload):
        return payload  # a coefficient vector travels as a list of floats

    @staticmethod
    def encode(x):
        return None if x is None else [float(v) for v in x]

    def timing(self) -> dict:
        return {}


class ESSource:
    timing_key = "noise_s"

    def __init__(self, names: list[str], *, lora=None, noise: str = "table", start: Mapping | None = None):
        self.names, self.lora, self.noise, self.start = names, lora, noise, start or {}
        self.master: dict[str, torch.Tensor] = {}
        self.theta: dict[str, torch.Tensor] = {}

    def bind(self, master: dict[str, torch.Tensor], *, device=None, shapes=None, base=None) -> dict:
        """θ_0 = master (+ the start's update on the ES tensors); with `lora`, fresh factors over the ES tensors.
        An empty master (LoRA candidates) needs `shapes`, `device` and `base` (tensor name → its fp32 checkpoint
        weight): the start's tensors, base + update, are returned to be installed once, and nothing is kept."""
        from hyper_es.es.scope import add_start, check_start

        self.master = master
        device = device if device is not None else _device(master)
        installs = {}
        if master:
            add_start({n: master[n] for n in self.names}, self.start)
        elif self.start:
            if self.lora is None:
                raise HyperESError("a dense ES source needs its fp32 master (candidates: inplace)")
            check_start(self.names, self.start)
            installs = {n: base(n) for n in self.start}
            add_start(installs, self.start)
        if self.lora is None:
            self.theta = master
        else:
            from hyper_es.es.lora import init_factors

            shape = (lambda n: tuple(master[n].shape)) if master else (lambda n: tuple(shapes[n]))
            self.theta = init_factors({n: shape(n) for n in self.names}, self.lora.r, device)
        return installs

    def weights(self, member: Member | None) -> Weights:
        """θ + scale·ε(seed) (dense), or W₀ + s·B'A' (LoRA), for every tensor of the master; None: θ itself."""
        from hyper_es.es.noise import perturbed

        if self.lora is not None:
            from hyper_es.es.lora import installed

            m = None if member is None else (member.seed, member.scale)
            for n, w in self.master.items():
                yield n, (next(installed({n: w}, self.theta, self.lora.scaling, m, self.noise))[1]
                          if f"{n}:A" in self.theta else w), None
            return
        stream = iter(self.master.items()) if member is None else perturbed(self.master, member.seed, member.scale,
                                                                            self.noise)
        yield from ((n, w, None) for n, w in stream)

    def factors(self, member: Member | None) -> Factors:
        """The member as one LoRA over W₀ (+ the start): (W, A', scaling·B'); None: θ's own factors."""
        if self.lora is None:
            raise HyperESError(f"LoRA candidates need es.scope: lora (this ES source has {len(self.names)} dense "
                               f"tensors)")
        from hyper_es.es.lora import member_factors

        m = None if member is None else (member.seed, member.scale)
        for n, a, b in member_factors(self.names, self.theta, m, self.noise):
            yield n, a, self.lora.scaling * b

    def update(self, seeds, z, sigma: float, alpha: float, signs) -> None:
        from hyper_es.es.update import apply_update

        apply_update(self.theta, seeds, z, sigma, alpha, signs, kind=self.noise)

    @staticmethod
    def decode(payload) -> Member | None:
        return None if payload is None else Member(int(payload[0]), float(payload[1]))

    @staticmethod
    def encode(member: Member | None):
        return None if member is None else [int(member.seed), float(member.scale)]

    def timing(self) -> dict:
        from hyper_es.es.noise import threads

        return {"noise_threads": threads()}


def _device(master: Mapping[str, torch.Tensor]):
    return next(iter(master.values())).device if master else torch.device("cpu")


@dataclass
class MergeWeights:
    """Candidates are coefficient vectors of `genome` over the directions `ds`, merged with `settings`."""

    ds: object
    genome: object
    settings: object
    fused: bool = False
    merge_device: str = "auto"
    prepare: bool = True
    delta_dtype: str = "float32"
    source_cls = MergeSource

    @property
    def base(self) -> Path:
        return Path(self.ds.base_path)

    def source(self, shapes: Mapping[str, tuple] | None = None, device="cpu") -> MergeSource:
        """The source for an engine in this process (HF) whose model is on `device`; `shapes` is not needed (the
        plan knows its tensors). The deltas live there too unless `merge_device` is cpu, as in the vLLM worker."""
        from hyper_es.merging import MergePlan

        return MergeSource(MergePlan(self.ds, self.genome, self.settings, fused=self.fused, prepare=self.prepare,
                                     device=device if self.merge_device == "auto" else "cpu",
                                     dtype=getattr(torch, self.delta_dtype)))

    def _low_rank(self):
        """The candidates as LoRA factors (HyperESError if the merge is not linear), stacked once: the engine's
        start asks for the rank and the fidelity estimate several times."""
        if "_low" not in self.__dict__:
            from hyper_es.merging import MergePlan
            from hyper_es.merging.low_rank import LowRankPlan

            self.__dict__["_low"] = LowRankPlan(MergePlan(self.ds, self.genome, self.settings, prepare=False))
        return self.__dict__["_low"]

    def lora_rank(self) -> int:
        """The rank of the candidates as LoRA adapters (HyperESError if the merge is not linear)."""
        return self._low_rank().rank

    def inplace_fidelity(self, dtype: str) -> float:
        """The fidelity estimate of the search's start (the genome's uniform x0) installed in place in `dtype`, on
        8 evenly spaced tensors: from the LoRA factors for a linear merge of LoRA directions, else by merging them."""
        from hyper_es.engine.fidelity import factors_fidelity, merge_fidelity, sampled_names

        try:
            low = self._low_rank()
        except HyperESError:  # TIES, DARE, dense directions: merge the sampled tensors
            from hyper_es.merging import MergePlan

            plan = MergePlan(self.ds, self.genome, self.settings, prepare=False)
            only = set(sampled_names(list(plan.tensors)))
            return merge_fidelity(plan, self.genome.initial(), [dtype], only=only)[str(dtype)]
        return factors_fidelity(self.base, low.factors(self.genome.initial()), dtype, sampled_names(list(low.stacked)))

    def worker_spec(self, workdir: Path) -> dict:
        """Plain data for the vLLM worker: the directions and genome are saved under `workdir`."""
        workdir = Path(workdir)
        set_dir = self.ds.save(workdir / DIRECTIONS_DIR)
        (workdir / "genome.json").write_text(self.genome.to_json())
        return {"weights": "merge", "set_dir": str(set_dir), "genome": str(workdir / "genome.json"),
                "settings": json.loads(json.dumps(asdict(self.settings))), "base": str(self.base),
                "fused": self.fused, "device": self.merge_device, "prepare": self.prepare,
                "delta_dtype": self.delta_dtype}

    @staticmethod
    def from_spec(spec: dict, device) -> MergeSource:
        from hyper_es.directions import DirectionSet
        from hyper_es.merging import Genome, MergePlan, MergeSettings

        ds = DirectionSet.load(spec["set_dir"], validate=False)
        genome, _ = Genome.from_json(spec["genome"])
        inplace = spec.get("candidates", "inplace") == "inplace"  # LoRA candidates use the factors only
        return MergeSource(MergePlan(ds, genome, MergeSettings(**spec["settings"]), device=device,
                                     dtype=getattr(torch, spec.get("delta_dtype", "float32")),
                                     prepare=inplace and spec.get("prepare", True),
                                     fused=inplace and spec.get("fused", False)))


@dataclass
class ESWeights:
    """Candidates are ES members over `scope` of the model at `base` (architecture `architecture`)."""

    base: Path
    architecture: str
    scope: str
    lora: object = None  # es.lora.LoraShape for scope: lora
    noise: str = "table"
    start_file: Path | None = None  # a sequenced start's update (safetensors)
    sigma: float = 1e-3  # es.sigma: the scale of a member (serve.candidates: auto's fidelity estimate)
    source_cls = ESSource

    def _start(self) -> dict:
        if self.start_file is None:
            return {}
        from safetensors.torch import load_file

        return load_file(str(self.start_file))

    def source(self, shapes: Mapping[str, tuple] | None = None, device="cpu") -> ESSource:
        """The source over the ES tensors among `shapes` (the model's parameters; default: the checkpoint's). Its
        master and noise follow the weights it is bound to, so `device` is not needed."""
        from hyper_es import architectures
        from hyper_es.directions.sources import tensor_shapes
        from hyper_es.es.scope import es_tensors

        shapes = tensor_shapes(str(self.base)) if shapes is None else shapes
        names = es_tensors(shapes, self.scope, architectures.get(self.architecture).layer_pattern, self.lora)
        return ESSource(names, lora=self.lora, noise=self.noise, start=self._start())

    def lora_rank(self) -> int:
        if self.lora is None:
            raise HyperESError(f"LoRA candidates need es.scope: lora, not {self.scope}")
        return self.lora.r

    def inplace_fidelity(self, dtype: str) -> float:
        """The fidelity estimate of a first-generation member (θ_0 + σ·ε(seed 0)) installed in place in `dtype`, on
        8 evenly spaced ES tensors (LoRA targets for `scope: lora`)."""
        from hyper_es.directions.sources import checkpoint_tensors, read_tensor, tensor_shapes
        from hyper_es.engine.fidelity import estimates, factors_fidelity, sampled_names
        from hyper_es.es.lora import init_factors, member_factors

        names = sampled_names(self.source(tensor_shapes(self.base)).names)
        if self.lora is None:  # dense: the member's noise on the base weights
            from hyper_es.es.noise import perturbed

            files = checkpoint_tensors(self.base)
            master = {n: read_tensor(files[n], n).float() for n in names}
            pairs = ((master[n], w - master[n]) for n, w in perturbed(master, 0, self.sigma, self.noise))
            return next(iter(estimates(pairs, [dtype]).values()))
        shapes = tensor_shapes(self.base)
        theta = init_factors({n: shapes[n] for n in names}, self.lora.r)
        factors = ((n, a, self.lora.scaling * b) for n, a, b in member_factors(names, theta, (0, self.sigma),
                                                                                 self.noise))
        return factors_fidelity(self.base, factors, dtype, names)

    def worker_spec(self, workdir: Path | None = None) -> dict:
        lora = None if self.lora is None else {"r": self.lora.r, "alpha": self.lora.alpha,
                                               "targets": list(self.lora.targets)}
        return {"weights": "es", "base": str(self.base), "architecture": self.architecture, "scope": self.scope,
                "noise": self.noise, "lora": lora, "start": None if self.start_file is None else str(self.start_file)}

    @staticmethod
    def from_spec(spec: dict, device) -> ESSource:
        from hyper_es.es.lora import LoraShape

        lora = spec.get("lora")
        weights = ESWeights(Path(spec["base"]), spec["architecture"], spec["scope"],
                            None if not lora else LoraShape(lora["r"], lora["alpha"], tuple(lora["targets"])),
                            spec.get("noise", "generator"), Path(spec["start"]) if spec.get("start") else None)
        return weights.source()


SPECS = {"merge": MergeWeights, "es": ESWeights}  # the worker spec's tag -> the weights it describes
