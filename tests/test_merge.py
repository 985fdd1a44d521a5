"""Merge: parity with mergekit 0.1.5, determinism, properties and bad input (tiny model, K=3 random directions)."""

import hashlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import hyper_es as hx
from hyper_es.errors import HyperESError
from hyper_es.merging import Genome, MergePlan, MergeSettings, dare_mask, genome_for

NAMES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def base_sd(tiny_path):
    from safetensors.torch import load_file

    return load_file(str(tiny_path / "model.safetensors"))


@pytest.fixture(scope="module")
def ds(tiny_path, base_sd):
    gen = torch.Generator().manual_seed(0)
    linear = [t for t in base_sd if t.endswith("proj.weight")]
    deltas = {n: {t: 0.01 * torch.randn(base_sd[t].shape, generator=gen) for t in linear} for n in NAMES}
    return hx.DirectionSet.from_dicts(str(tiny_path), deltas)


def mergekit_merge(base_sd, ds, weights, method, **params):
    from mergekit.merge_methods import merge_state_dicts

    models = {"base": base_sd}
    for k, n in enumerate(ds.names):
        models[n] = {t: v + ds.delta(k, t) if t in ds.tensor_names() else v for t, v in base_sd.items()}
    return merge_state_dicts(models, method, base="base", dtype=torch.float32,
                             parameters={"weight": dict(zip(ds.names, weights)), **params})


@pytest.mark.parametrize("method", ["dare_ties", "ties"])
@pytest.mark.parametrize("normalize", [False, True])
def test_density_one_equals_mergekit(base_sd, ds, method, normalize):
    weights = [0.7, -0.4, 1.3]
    ours = hx.merge(base_sd, ds, dict(zip(NAMES, weights)), density=1.0, method=method, normalize=normalize)
    theirs = mergekit_merge(base_sd, ds, weights, method, density=1.0, normalize=normalize)
    for t in base_sd:
        torch.testing.assert_close(ours[t], theirs[t], rtol=0, atol=1e-6)


def test_task_arithmetic_equals_mergekit(base_sd, ds):
    ours = hx.merge(base_sd, ds, {"a": 0.5, "b": 0.2, "c": -0.3}, method="task_arithmetic")
    theirs = mergekit_merge(base_sd, ds, [0.5, 0.2, -0.3], "task_arithmetic", normalize=False)
    for t in base_sd:
        torch.testing.assert_close(ours[t], theirs[t], rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", ["task_arithmetic", "ties"])
def test_the_composition_controls_are_mergekit_at_its_defaults(base_sd, ds, method):
    """eval.merges' unit merge: every direction at weight 1 with mergekit's own defaults for the method (density 1,
    its normalize, lambda 1), passed nothing but the weights."""
    ours = hx.merging.unit_merge(ds, method)
    theirs = mergekit_merge(base_sd, ds, [1.0] * len(NAMES), method)
    for t in base_sd:
        torch.testing.assert_close(base_sd[t] + ours[t] if t in ours else base_sd[t], theirs[t], rtol=0, atol=1e-6)


@pytest.mark.parametrize("normalize", [False, True])
def test_density_p_equals_mergekit_formula_on_our_masks(base_sd, ds, normalize):
    """Our DARE masks, then mergekit's own building blocks (L1 rescale, sign election) on the same masks."""
    from mergekit.merge_methods.generalized_task_arithmetic import get_mask
    from mergekit.sparsify import RescaleNorm, rescaled_masked_tensor

    p, weights, seed = 0.4, torch.tensor([0.7, -0.4, 1.3]), 5
    ours = hx.merge(base_sd, ds, dict(zip(NAMES, weights.tolist())), density=p, seed=seed, normalize=normalize)
    for t in ds.tensor_names():
        deltas = torch.stack([
            rescaled_masked_tensor(ds.delta(k, t), dare_mask(base_sd[t].shape, p, seed, k, t).float(), RescaleNorm.l1)
            for k in range(3)
        ])
        w = weights.view(-1, *([1] * (deltas.dim() - 1)))
        deltas = deltas * w
        mask = get_mask(deltas, method="sum")
        mixed = (deltas * mask).sum(0)
        if normalize:
            divisor = (w * mask).sum(0)
            divisor[divisor == 0] = 1
            mixed = mixed / divisor
        torch.testing.assert_close(ours[t], base_sd[t] + mixed, rtol=0, atol=1e-6)


def _digest(sd) -> str:
    h = hashlib.sha256()
    for t in sorted(sd):
        h.update(sd[t].contiguous().numpy().tobytes())
    return h.hexdigest()


def test_masks_are_deterministic_across_processes(base_sd, ds, tiny_path, tmp_path):
    saved = ds.save(tmp_path / "set")
    code = (
        "import sys, hashlib, torch, hyper_es as hx\n"
        "from safetensors.torch import load_file\n"
        f"ds = hx.DirectionSet.load({str(saved)!r})\n"
        f"sd = load_file({str(tiny_path / 'model.safetensors')!r})\n"
        "m = hx.merge(sd, ds, {'a': 0.5, 'b': 1.0, 'c': 0.25}, density=0.3, seed=11)\n"
        "h = hashlib.sha256()\n"
        "[h.update(m[t].contiguous().numpy().tobytes()) for t in sorted(m)]\n"
        "print(h.hexdigest())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    here = hx.merge(base_sd, ds, {"a": 0.5, "b": 1.0, "c": 0.25}, density=0.3, seed=11)
    assert out == _digest(here)
    other_seed = hx.merge(base_sd, ds, {"a": 0.5, "b": 1.0, "c": 0.25}, density=0.3, seed=12)
    assert _digest(other_seed) != out


def test_zero_coefficients_give_base_exactly(base_sd, ds):
    genome = genome_for(ds, layer_group_size=2, module_groups=True)
    for method in ("dare_ties", "ties", "task_arithmetic", "dare_linear"):
        density = 1.0 if method == "task_arithmetic" else 0.5  # nothing to sparsify: a density < 1 is refused
        merged = hx.merge(base_sd, ds, genome.uniform(0.0), genome=genome, method=method, density=density)
        assert all(torch.equal(merged[t], base_sd[t]) for t in base_sd)
    with pytest.raises(HyperESError, match="task_arithmetic keeps every entry, so density 0.5 would change nothing"):
        hx.merge(base_sd, ds, genome.uniform(0.0), genome=genome, method="task_arithmetic", density=0.5)


def test_single_direction_coefficient_one_is_base_plus_delta(base_sd, tiny_path, ds):
    one = hx.DirectionSet.from_dicts(str(tiny_path), {"a": {t: ds.delta(0, t) for t in ds.tensor_names()}})
    merged = hx.merge(base_sd, one, {"a": 1.0})
    for t in ds.tensor_names():
        assert torch.equal(merged[t], base_sd[t] + ds.delta(0, t))


def test_dare_inverse_rescale_preserves_expected_delta():
    """E[mask·δ/p] = δ. Over N independent masks the mean's error per entry has std |δ|·sqrt((1−p)/(p·N));
    we require every entry within 6 standard errors (a false alarm rate below 1e-6 per entry)."""
    from hyper_es.merging.core import sparsify

    p, n = 0.3, 400
    delta = torch.linspace(-1, 1, 50)
    mean = sum(sparsify(delta, "dare", p, "inverse", s, 0, "t") for s in range(n)) / n
    bound = 6 * delta.abs() * ((1 - p) / (p * n)) ** 0.5
    assert torch.all((mean - delta).abs() <= bound + 1e-7)
    kept = sum(dare_mask(torch.Size([10_000]), p, s, 0, "t").float().mean() for s in range(20)) / 20
    assert abs(float(kept) - p) < 0.01


def test_plan_reuses_prepared_deltas_and_matches_merge(base_sd, ds):
    genome = genome_for(ds, layer_group_size=2)
    plan = MergePlan(ds, genome, MergeSettings(density=0.5, seed=3))
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.uniform(-1, 2, genome.size)
        a = plan.apply(base_sd, x)
        b = hx.merge(base_sd, ds, x, genome=genome, density=0.5, seed=3)
        assert all(torch.equal(a[t], b[t]) for t in base_sd)


def test_genome_layout_bounds_and_json(ds):
    g = genome_for(ds, layer_group_size=3, module_groups=True, per_direction_density=True, bounds=(-0.5, 1.5))
    assert g.layer_groups == ["L0-2", "L3"]
    assert g.modules == ("attention", "mlp")  # no direction touches "other" (norms): no genes for it
    assert g.size == 2 * 3 * 2 + 3
    lo, hi = g.lower_upper()
    assert lo.tolist() == [-0.5] * 12 + [0.05] * 3 and hi.tolist() == [1.5] * 12 + [1.0] * 3
    x0 = g.initial("uniform", density=0.8)
    assert np.allclose(x0[:12], 1 / 3) and np.allclose(x0[12:], 0.8)
    assert g.key_for("model.layers.3.mlp.down_proj.weight", "b") == ("L3", "b", "mlp")
    g2, x2 = Genome.from_json(g.to_json(x0))
    assert g2 == g and np.array_equal(x2, x0)
    assert "L0-2" in g.table(x0) and "density" in g.table(x0)


@pytest.mark.parametrize("preset, groups, modules", [("direction", ["L0-3"], ("all",)),
                                                     ("module", ["L0-3"], ("attention", "mlp")),
                                                     ("layer", ["L0-1", "L2-3"], ("attention", "mlp"))])
def test_genome_presets_resolve_to_their_documented_shapes(ds, tmp_path, preset, groups, modules):
    """merge.genome, coarse to fine: per direction; per direction × module group; per layer group × direction ×
    module group (layer_group_size as given: 2 here). The tiny model has 4 layers, the set 3 directions."""
    from hyper_es.merging import recipe_genome
    from recipes import tiny_recipe

    merge = {"genome": preset, **({"layer_group_size": 2} if preset == "layer" else {})}
    recipe = tiny_recipe(tmp_path, {"merge": merge}, write=True)  # written and read back: the preset round-trips
    genome, _ = recipe_genome(recipe, ds)
    assert genome.layer_groups == groups and genome.module_names == modules
    assert genome.size == len(groups) * len(NAMES) * len(modules)
    if preset != "layer":  # a layout field set to neither the preset's value nor its default is refused
        with pytest.raises(hx.errors.RecipeError, match=f"merge: genome: {preset} sets layer_group_size: all, got "
                                                        "layer_group_size: 2"):
            tiny_recipe(tmp_path, {"merge": {"genome": preset, "layer_group_size": 2}})


def test_bad_input(base_sd, ds):
    g = genome_for(ds)
    with pytest.raises(HyperESError, match=f"genome vector has 3 values, expected {g.size}"):
        hx.merge(base_sd, ds, [1.0, 2.0, 3.0], genome=g)
    with pytest.raises(HyperESError, match="non-finite values at positions \\[1\\]"):
        hx.merge(base_sd, ds, [0.0, float("nan")] + [0.0] * (g.size - 2), genome=g)
    with pytest.raises(HyperESError, match="density must be in \\(0, 1\\], got 1.5"):
        hx.merge(base_sd, ds, {"a": 1, "b": 1, "c": 1}, density=1.5)
    with pytest.raises(HyperESError, match="density must be in \\(0, 1\\], got 0"):
        hx.merge(base_sd, ds, {"a": 1, "b": 1, "c": 1}, density=0)
    with pytest.raises(HyperESError, match="unknown merge method 'slerp'"):
        hx.merge(base_sd, ds, {"a": 1, "b": 1, "c": 1}, method="slerp")
    with pytest.raises(HyperESError, match="coefficients must name every direction"):
        hx.merge(base_sd, ds, {"a": 1, "zz": 1, "c": 1})
    pd = genome_for(ds, per_direction_density=True)
    with pytest.raises(HyperESError, match="densities must be in \\(0, 1\\]"):
        pd.check(list(pd.initial()[:-1]) + [0.0])
    with pytest.raises(HyperESError, match="unknown initial point 'half'; expected zeros, uniform, ones"):
        g.initial("half")
    assert not g.initial("zeros").any() and g.scaled(g.initial("ones"), 0.5).tolist() == [0.5] * g.size
    mg = genome_for(ds, module_groups=True)
    named = mg.coefficients(mg.initial())
    assert np.array_equal(mg.vector(named), mg.initial())
    bad = {(gr, d, "embeddings" if m == "mlp" else m): v for (gr, d, m), v in named.items()}
    with pytest.raises(HyperESError, match="unknown module group 'embeddings'; expected one of: attention, mlp"):
        mg.vector(bad)
    with pytest.raises(HyperESError, match="unknown direction 'zz'"):
        mg.vector({("L0", "zz", "mlp"): 1.0})


@pytest.mark.parametrize("consensus", ["sum", "count"])
@pytest.mark.parametrize("normalize", [False, True])
def test_combine_equals_mergekit_building_blocks(consensus, normalize):
    from mergekit.merge_methods.generalized_task_arithmetic import get_mask

    from hyper_es.merging.core import combine

    g = torch.Generator().manual_seed(1)
    deltas = torch.randn(4, 50, 30, generator=g) * (torch.rand(4, 50, 30, generator=g) > 0.3)  # with exact zeros
    w = torch.tensor([0.5, -1.0, 2.0, 0.25])
    weighted = deltas * w.view(-1, 1, 1)
    mask = get_mask(weighted, method=consensus)
    want = (weighted * mask).sum(0)
    if normalize:
        divisor = (w.view(-1, 1, 1) * mask).sum(0)
        divisor[divisor == 0] = 1
        want = want / divisor
    got = combine(deltas, w, ties=True, consensus=consensus, normalize=normalize, lam=0.7)
    torch.testing.assert_close(got, want * 0.7, rtol=0, atol=1e-5)


def test_fused_combine_equals_eager():
    """The compiled combine the search uses against the eager reference, for every method and setting."""
    from hyper_es.merging.core import combine, fused_combine

    g = torch.Generator().manual_seed(2)
    fused = fused_combine()
    for shape in ((4, 50, 30), (4, 70)):  # dynamic shapes: one compilation serves every tensor
        deltas = torch.randn(*shape, generator=g) * (torch.rand(*shape, generator=g) > 0.3)
        for w in (torch.tensor([0.5, -1.0, 2.0, 0.25]), torch.tensor([-0.3, -1.0, 0.0, -2.0])):
            for ties, consensus, normalize in [(True, "sum", False), (True, "count", True), (False, "sum", True),
                                               (False, "sum", False)]:
                kw = dict(ties=ties, consensus=consensus, normalize=normalize, lam=0.7)
                torch.testing.assert_close(fused(deltas, w, **kw), combine(deltas, w, **kw), rtol=0, atol=1e-6)


def test_per_layer_density_dare_ties_by_hand(base_sd, ds):
    """The paper's genome: a DARE density and a TIES weight per layer group per direction. Every merged tensor
    equals the DARE-TIES formula computed here by hand: mask with that group's density, L1 rescale, weight,
    elect the sign by the sum, keep the agreeing entries."""
    g = genome_for(ds, layer_group_size=2, per_layer_density=True)
    assert g.layer_groups == ["L0-1", "L2-3"] and g.size == 2 * 3 * 2
    assert g.density_keys == [(grp, d) for grp in ("L0-1", "L2-3") for d in NAMES]
    weights = {("L0-1", "a"): 0.7, ("L0-1", "b"): -0.4, ("L0-1", "c"): 1.3,
               ("L2-3", "a"): 0.2, ("L2-3", "b"): 1.1, ("L2-3", "c"): 0.5}
    dens = {("L0-1", "a"): 0.3, ("L0-1", "b"): 0.9, ("L0-1", "c"): 0.6,
            ("L2-3", "a"): 1.0, ("L2-3", "b"): 0.15, ("L2-3", "c"): 0.5}
    x = g.vector({(grp, d, "all"): w for (grp, d), w in weights.items()}, dens)
    assert x[:6].tolist() == [weights[k] for k in g.density_keys] and x[6:].tolist() == [dens[k] for k in g.density_keys]
    assert g.layer_densities(x, 1.0) == dens
    merged = hx.merge(base_sd, ds, x, genome=g, method="dare_ties", seed=5)
    for t in ds.tensor_names():
        grp = "L0-1" if int(t.split(".")[2]) < 2 else "L2-3"
        pos = neg = torch.zeros_like(base_sd[t])
        for k, name in enumerate(NAMES):
            delta, p = ds.delta(k, t), dens[(grp, name)]
            if p < 1:
                masked = delta * dare_mask(delta.shape, p, 5, k, t)
                delta = masked * (delta.abs().sum() / masked.abs().sum())
            wd = weights[(grp, name)] * delta
            pos, neg = pos + wd.clamp(min=0), neg + wd.clamp(max=0)
        expected = base_sd[t] + torch.where(pos + neg >= 0, pos, neg)
        assert torch.allclose(merged[t], expected, atol=1e-7, rtol=0), t
    g2, x2 = Genome.from_json(g.to_json(x))
    assert g2 == g and np.array_equal(x2, x)
    assert "dens L2-3" in g.table(x)
    with pytest.raises(HyperESError, match="use layer_densities"):
        g.densities(x, 1.0)
    with pytest.raises(HyperESError, match="choose one density layout"):
        genome_for(ds, per_direction_density=True, per_layer_density=True)
