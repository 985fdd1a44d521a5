"""Exports: HF folder, mergekit YAML reproduced by mergekit.merge.run_merge, PEFT adapter by truncated SVD."""

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

import hyper_es as hx
from hyper_es.export import export_hf, export_mergekit, export_peft
from hyper_es.merging import MergePlan, MergeSettings, genome_for


@pytest.fixture(scope="module")
def adapters(tiny_path, tmp_path_factory):
    from peft import LoraConfig, get_peft_model

    from hyper_es import models

    root = tmp_path_factory.mktemp("adapters")
    out = []
    for k in range(3):
        model, _ = models.load(str(tiny_path))
        torch.manual_seed(k)
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "up_proj", "o_proj"]))
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.05)
        peft_model.save_pretrained(root / f"d{k}")
        out.append(root / f"d{k}")
    return out


@pytest.fixture(scope="module")
def setup(tiny_path, adapters):
    ds = hx.DirectionSet.from_adapters(str(tiny_path), adapters)
    genome = genome_for(ds, layer_group_size=2, module_groups=True)
    x = np.random.default_rng(1).uniform(-0.5, 1.5, genome.size)
    base = load_file(str(tiny_path / "model.safetensors"))
    return ds, genome, x, base


@pytest.mark.parametrize("normalize,per_layer", [(False, False), (True, False), (False, True)])
def test_mergekit_yaml_reproduces_density_one_merge(setup, tmp_path, normalize, per_layer):
    """With per-layer densities (all 1 here, so mergekit's own masks keep everything) the YAML carries one density
    per layer, which mergekit accepts and applies per layer."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    ds, genome, x, base = setup
    if per_layer:
        genome = genome_for(ds, layer_group_size=2, module_groups=True, per_layer_density=True)
        x = np.concatenate([x, np.ones(len(genome.density_keys))])
    settings = MergeSettings(density=1.0, normalize=normalize)
    path = export_mergekit(ds, genome, x, settings, tmp_path / "merge.yaml")
    densities = [m["parameters"]["density"] for m in yaml.safe_load(path.read_text())["models"]]
    assert all(d == [1.0] * genome.num_layers if per_layer else d == 1.0 for d in densities)
    config = MergeConfiguration.model_validate(yaml.safe_load(path.read_text()))
    run_merge(config, str(tmp_path / "out"), MergeOptions(lora_merge_cache=str(tmp_path / "cache"),
                                                           lora_merge_dtype="float32"))
    theirs = load_file(str(tmp_path / "out" / "model.safetensors"))
    ours = MergePlan(ds, genome, settings).apply(base, x)
    assert ds.tensor_names()
    for t in base:
        torch.testing.assert_close(ours[t], theirs[t], rtol=0, atol=1e-5, msg=t)


def test_hf_export_loads_with_the_merged_weights(setup, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ds, genome, x, base = setup
    settings = MergeSettings(density=0.5, seed=3)
    out = export_hf(ds, genome, x, settings, tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).chat_template
    want = MergePlan(ds, genome, settings).apply(base, x)
    got = model.state_dict()
    for t in base:
        assert torch.equal(got[t], want[t]), t


def test_peft_export_is_exact_at_full_rank_and_reports_errors(setup, tmp_path):
    from peft import PeftModel

    from hyper_es import models

    ds, genome, x, base = setup
    # Task arithmetic of 3 rank-4 LoRAs has rank <= 12: exact at rank 12. TIES masks entries, so its merged
    # update is full rank: exact only at full rank (64 here), and the error shrinks as the rank grows.
    linear = MergeSettings(method="task_arithmetic")
    assert max(export_peft(ds, genome, x, linear, tmp_path / "ta", rank=12).values()) < 1e-5
    settings = MergeSettings()
    with pytest.raises(hx.HyperESError, match="rank-2 LoRA is .*% off the merged update.*nothing written"):
        export_peft(ds, genome, x, settings, tmp_path / "refused", rank=2)  # the default max_error: 1%
    assert not (tmp_path / "refused").exists()
    errs = {r: export_peft(ds, genome, x, settings, tmp_path / f"r{r}", rank=r, max_error=None) for r in (2, 16, 64)}
    assert errs[2].whole > errs[16].whole > 0.01 > 1e-5 > errs[64].whole
    assert set(errs[2]) == set(ds.tensor_names())
    assert np.mean(list(errs[2].values())) > np.mean(list(errs[16].values())) > max(errs[64].values())
    assert max(errs[64].values()) < 1e-5
    model, _ = models.load(str(ds.base_path))
    merged = PeftModel.from_pretrained(model, str(tmp_path / "r64")).merge_and_unload().state_dict()
    want = MergePlan(ds, genome, settings).apply(base, x)
    for t in ds.tensor_names():
        torch.testing.assert_close(merged[t], want[t], rtol=0, atol=1e-5)


def test_in_memory_directions_cannot_go_to_mergekit(setup, tmp_path):
    ds, genome, x, _ = setup
    mem = hx.DirectionSet.from_dicts(str(ds.base_path), {n: {t: ds.delta(k, t) for t in ds.tensor_names()}
                                                          for k, n in enumerate(ds.names)})
    with pytest.raises(hx.HyperESError, match="lives only in memory"):
        export_mergekit(mem, genome, x, MergeSettings(), tmp_path / "m.yaml")
