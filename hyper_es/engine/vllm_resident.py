"""The resident vLLM engine: the weight source lives inside the worker (engine/vllm_worker.py), so the driver sends
only a candidate (a coefficient vector, or an ES member's seed and scale) and an ES step's seeds and rewards.

Two ways to serve a candidate (`candidates`): `inplace` writes base + ΔW into the engine's weights; `lora` registers
ΔW as an in-memory LoRA adapter (a linear merge of LoRA directions, or an ES `scope: lora` member), so nothing of
the update rounds into bf16 weights, and `generate_candidates` serves a whole generation, one adapter per
candidate, in one engine call."""

from __future__ import annotations

from pathlib import Path

from hyper_es.engine.vllm import VLLMGenerator, lora_slots
from hyper_es.errors import HyperESError

WORKER = "hyper_es.engine.vllm_worker.HyperESWorker"
ADAPTER_PATH = "/hyper-es/in-memory-adapter"  # never read: the worker registers every adapter before its request


class VLLMResident(VLLMGenerator):
    """`set_genome(g)` installs candidate g (None: the source's resting weights); `restore()` those; `update` an ES
    step. `last_timing` is the worker's split of the last call, `last_fidelity` its fidelity (as HFResident).
    `load(weights)` swaps in another weight source on the same base without a restart; `unload()` serves the
    checkpoint again. Started without `weights`, the engine serves the checkpoint until a source is loaded."""

    show_progress = False

    def __init__(self, model: str | Path, tokenizer, weights=None, workdir: Path | None = None, *,
                 candidates: str = "inplace", lora_rank: int | None = None, max_loras: int = 1, **engine_kwargs):
        """`candidates: lora` starts the engine with LoRA enabled: adapters up to `lora_rank` (default: the rank of
        `weights`' candidates), `max_loras` of them in one batch."""
        if candidates not in ("inplace", "lora"):
            raise HyperESError(f"candidates must be inplace or lora, got '{candidates}'")
        self.candidates = self.started_as = candidates
        self.max_loras, self.max_lora_rank = max_loras, 0
        if candidates == "lora":
            rank = lora_rank or (weights.lora_rank() if weights is not None else None)
            if rank is None:
                raise HyperESError("a LoRA-candidate engine needs lora_rank or weights to size its adapters")
            self.max_lora_rank = lora_slots(rank)
            # one slot per candidate of a batch, and one more for the candidate set by set_genome
            engine_kwargs.update(enable_lora=True, max_lora_rank=self.max_lora_rank, max_loras=max_loras,
                                 max_cpu_loras=max_loras + 1)
        # The worker keeps vLLM's own thread settings: weights are written while generation is paused.
        super().__init__(model, tokenizer, worker_extension_cls=WORKER, **engine_kwargs)
        self._forget()
        self.last_fidelity, self.last_timing, self.last_fidelities = 0.0, {}, []
        # Adapter ids and names are never reused in an engine's life: vLLM's prefix cache is keyed on the name (since
        # its PR #27211) or, before it, on the integer id, so a reused one could serve another candidate's KV.
        self._last_id = 0
        if weights is not None:
            try:
                self.load(weights, workdir)
            except HyperESError:
                self.close()
                raise

    def load(self, weights, workdir: Path | None = None, *, candidates: str | None = None) -> None:
        """Bind `weights` (sources.MergeWeights or ESWeights of this engine's base model) and install their resting
        weights; a source loaded before is unloaded first. `candidates`: inplace or lora for this source (lora
        needs an engine started with it; default: the engine's)."""
        if Path(weights.base).resolve() != self.model_path.resolve():
            raise HyperESError(f"this engine serves {self.model_path}; the weights given are for {weights.base}")
        if candidates == "lora" and not self.max_lora_rank:
            raise HyperESError("this engine was started without LoRA (candidates: inplace); it serves candidates in "
                               "place only")
        self.candidates = candidates or self.started_as
        if self.candidates == "lora" and weights.lora_rank() > self.max_lora_rank:
            raise HyperESError(f"these candidates are LoRA adapters of rank {weights.lora_rank()}; this engine was "
                               f"started for rank {self.max_lora_rank} at most")
        spec = {**weights.worker_spec(workdir), "candidates": self.candidates}
        loaded = self.llm.collective_rpc("hx_load", args=(spec,))[0]
        self.llm.reset_prefix_cache()
        if "error" in loaded:
            self._forget()
            raise HyperESError(loaded["error"])
        self.encode, self.timing_key = weights.source_cls.encode, weights.source_cls.timing_key
        self.targets, self.names = loaded["targets"], loaded["names"]

    def unload(self) -> None:
        """The checkpoint's weights back, and no source."""
        if self.candidates == "lora":
            self._drop_current()
        self.llm.collective_rpc("hx_unload")
        self.llm.reset_prefix_cache()
        self._forget()

    def _forget(self) -> None:
        """No source: no candidate encoding, no targets."""
        self.encode, self.targets, self.names, self._current, self._current_id = None, 0, [], None, None

    def _loaded(self) -> None:
        if self.encode is None:
            raise HyperESError("no weight source is loaded in this engine (VLLMResident.load)")

    def set_genome(self, genome) -> None:
        """Serve `genome` in the calls that follow (in place, or as the adapter every request names)."""
        self._loaded()
        if self.candidates == "lora":
            self._drop_current()
            self._current = self._register([genome], self._fresh_ids(1))[0]
            self._current_id = None if self._current is None else self._current.lora_int_id
            self.last_fidelity = self.last_fidelities[0]
            return
        self.last_timing = self.llm.collective_rpc("hx_set", args=(self.encode(genome),))[0]
        self.last_fidelity = self.last_timing.get("fidelity", 0.0)
        self.llm.reset_prefix_cache()  # stale KV of the old weights would otherwise be reused

    def restore(self) -> None:
        self.set_genome(None)

    def update(self, seeds, z, sigma: float, alpha: float, signs) -> None:
        self._loaded()
        args = ([int(s) for s in seeds], [float(v) for v in z], float(sigma), float(alpha), [int(s) for s in signs])
        self.last_timing = self.llm.collective_rpc("hx_update", args=args)[0]
        self.llm.reset_prefix_cache()
        if self.candidates == "lora":  # θ moved: serve the new θ, as an in-place update installs it
            update = self.last_timing
            self.set_genome(None)
            self.last_timing = {**self.last_timing, **update}

    def _register(self, genomes: list, ids: list[int]) -> list:
        """The genomes as adapters of `ids` in the worker; their LoRARequests (None: no update, no adapter)."""
        from vllm.lora.request import LoRARequest

        info = self.llm.collective_rpc("hx_adapters", args=([self.encode(g) for g in genomes], ids,
                                                             self.max_lora_rank))[0]
        self.last_fidelities = info["fidelity"]
        self.last_timing = {self.timing_key: info["factors_s"], "install_s": info["register_s"], "fidelity_s": 0.0,
                            "fidelity": max(info["fidelity"], default=0.0)}
        return [LoRARequest(f"hx-{i}", i, ADAPTER_PATH) if served else None
                for i, served in zip(ids, info["served"], strict=True)]

    def _fresh_ids(self, n: int) -> list[int]:
        """n adapter ids this engine has never used."""
        ids = list(range(self._last_id + 1, self._last_id + n + 1))
        self._last_id += n
        return ids

    def _drop_current(self) -> None:
        """Drop the adapter of set_genome, if one is registered."""
        if self._current_id is not None:
            self.llm.collective_rpc("hx_drop_adapters", args=([self._current_id],))
        self._current, self._current_id = None, None

    def _lora(self, n: int) -> dict:
        return {"lora_request": [self._current] * n} if self._current is not None else {}

    def generate_candidates(self, genomes: list, groups: list, seeds=None) -> list:
        """generate_groups(groups[i], seeds) for every genome i, in order (each genome its own prompt groups). LoRA
        candidates: every genome's prompts in one engine call (max_loras adapters at a time), each with its own
        adapter; in place: one genome after another.
        `last_fidelities`: each candidate's fidelity. Afterwards the engine serves the resting weights (LoRA) or the
        last genome (in place)."""
        self._loaded()
        if self.candidates != "lora":
            outs, fids = [], []
            for g, gs in zip(genomes, groups, strict=True):
                self.set_genome(g)
                outs.append(self.generate_groups(gs, seeds))
                fids.append(self.last_fidelity)
            self.last_fidelities = fids
            return outs
        # The candidate of set_genome leaves its slot: a chunk with a candidate without an update then holds at most
        # max_loras - 1 adapters, and the last slot, which such a request reads on CPU, stays zero.
        self._drop_current()
        made = [self._requests(gs, seeds) for gs in groups]
        if len(made) != len(genomes):
            raise ValueError(f"generate_candidates: {len(genomes)} genomes but {len(made)} prompt groups")
        outs, fids = [], []
        for start in range(0, len(genomes), self.max_loras):
            chunk, asks = genomes[start:start + self.max_loras], made[start:start + self.max_loras]
            ids = self._fresh_ids(len(chunk))
            requests = self._register(chunk, ids)
            fids += self.last_fidelities
            done = iter(self.llm.generate([p for ps, _ in asks for p in ps], [q for _, qs in asks for q in qs],
                                          use_tqdm=self.show_progress,
                                          lora_request=[r for r, (ps, _) in zip(requests, asks) for _ in ps]))
            outs += [self._unpack(done, gs) for gs in groups[start:start + self.max_loras]]
            self.llm.collective_rpc("hx_drop_adapters", args=(ids,))
        self.last_fidelities = fids
        return outs
