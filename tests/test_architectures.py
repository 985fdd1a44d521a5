"""The architecture table (hyper_es/architectures/*.json): shipped files, GPT-2 naming, and adding a family by
dropping one JSON file into a copy of the package."""

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

import hyper_es as hx
from hyper_es import architectures
from hyper_es.errors import HyperESError
from hyper_es.merging import Genome, MergeSettings, genome_for

PKG = Path(hx.__file__).parent


def tiny_model(out: Path, tiny_path: Path, kind: str) -> Path:
    """A random GPT-2 (4 layers, head_dim 32 as vLLM-CPU needs) or GPT-NeoX (3 layers), tiny-random's tokenizer."""
    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path)
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=4, n_embd=64, n_head=2, n_positions=512, vocab_size=len(tok),
                                         eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.GPTNeoXConfig(num_hidden_layers=3, hidden_size=32, num_attention_heads=2,
                                            intermediate_size=64, max_position_embeddings=512, vocab_size=len(tok))
        model = transformers.GPTNeoXForCausalLM(config)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def gpt2_path(tiny_path, tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("gpt2"), tiny_path, "gpt2")


def test_shipped_tables_load_and_are_consistent():
    table = architectures.table()
    assert {"llama", "gpt2"} <= set(table)
    assert {p.stem for p in PKG.joinpath("architectures").glob("*.json")} == set(table)
    for a in table.values():
        assert all(a.layer_index(a.layer_prefix(i) + "w.weight") == i for i in range(40))
        assert architectures.for_name(a.architectures[0]) is a
    llama = table["llama"]
    assert llama.vllm_target("model.layers.2.mlp.up_proj.weight") == (
        "model.layers.2.mlp.gate_up_proj", ("model.layers.2.mlp.gate_proj.weight", "model.layers.2.mlp.up_proj.weight"))
    o_proj = "model.layers.2.self_attn.o_proj.weight"
    assert llama.vllm_target(o_proj) == (o_proj, None)
    assert llama.layer_index("model.embed_tokens.weight") is None


def test_unknown_architecture_is_one_clear_error(tiny_path):
    assert architectures.for_model(tiny_path).name == "llama"
    with pytest.raises(HyperESError) as err:
        architectures.for_model({"architectures": ["GPTNeoXForCausalLM"]})
    msg = str(err.value)
    assert "\n" not in msg and "GPTNeoXForCausalLM" in msg and str(PKG / "architectures") in msg and "add" in msg
    with pytest.raises(HyperESError, match="unknown architecture family 'nope'"):
        Genome(("a",), 2, architecture="nope")


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.pop("layer_prefix"), "missing \\['layer_prefix'\\]"),
    (lambda d: d.update(layer_pattern="layers\\.\\d+"), "exactly one group"),
    (lambda d: d.update(layer_prefix="model.h.{i}."), "expected 0"),
    (lambda d: d.update(module_groups={"attn": "x"}), "module_groups"),
    (lambda d: d.update(mergekit_filters={"attention": "self_attn"}), "one substring per module group"),
])
def test_a_bad_table_file_is_named(tmp_path, monkeypatch, edit, match):
    d = json.loads((PKG / "architectures" / "llama.json").read_text())
    edit(d)
    (tmp_path / "mine.json").write_text(json.dumps(d))
    monkeypatch.setenv("HYPER_ES_ARCHITECTURES", str(tmp_path))
    with pytest.raises(HyperESError, match=match) as err:
        architectures.table()
    assert str(tmp_path / "mine.json") in str(err.value)


def test_gpt2_layer_groups_merge_and_geometry(gpt2_path):
    base = load_file(str(gpt2_path / "model.safetensors"))
    layer3 = [t for t in base if t.startswith("transformer.h.3.")]
    assert "transformer.h.3.attn.c_attn.weight" in layer3
    touched = [t for t in base if t.startswith("transformer.h.")] + ["transformer.ln_f.weight"]
    gen = torch.Generator().manual_seed(0)
    ds = hx.DirectionSet.from_dicts(str(gpt2_path), {n: {t: 0.1 * torch.randn(base[t].shape, generator=gen)
                                                         for t in touched} for n in ("a", "b")})
    g = genome_for(ds, module_groups=True)
    assert (g.architecture, g.num_layers, g.non_layer) == ("gpt2", 4, True)
    assert g.key_for("transformer.h.3.attn.c_attn.weight", "a") == ("L3", "a", "attention")
    assert g.key_for("transformer.h.3.attn.c_proj.weight", "b") == ("L3", "b", "attention")
    assert g.key_for("transformer.h.3.mlp.c_fc.weight", "a") == ("L3", "a", "mlp")
    assert g.key_for("transformer.h.3.ln_1.weight", "a") == ("L3", "a", "other")
    assert g.key_for("transformer.ln_f.weight", "a") == ("non-layer", "a", "other")
    assert genome_for(ds, layer_group_size=2).key_for("transformer.h.3.mlp.c_proj.bias", "a")[0] == "L2-3"
    assert Genome.from_json(g.to_json())[0] == g
    merged = hx.merge(base, ds, {"a": 1.0, "b": 0.0})
    for t in base:
        want = base[t] + ds.delta("a", t) if t in touched else base[t]
        assert torch.equal(merged[t], want), t
    norms = ds.geometry()["layer_norms"]["a"]
    assert list(norms) == ["0", "1", "2", "3", "other"]


def test_old_genome_json_without_family_is_llama():
    g = Genome(("a", "b"), 4, module_groups=True)
    data = json.loads(g.to_json())
    del data["genome"]["architecture"]
    assert Genome.from_json(json.dumps(data))[0].architecture == "llama"


NEOX = {
    "architectures": ["GPTNeoXForCausalLM"],
    "num_layers_keys": ["num_hidden_layers"],
    "layer_pattern": "\\.layers\\.(\\d+)\\.",
    "layer_prefix": "gpt_neox.layers.{i}.",
    "module_groups": {"attention": "\\.attention\\.", "mlp": "\\.mlp\\."},
    "mergekit_filters": {"attention": ".attention.", "mlp": ".mlp."},
    "vllm_fusions": {},
    "vllm_transposed": [],
}

# Runs in a fresh interpreter on the package copy: genome, merge, HF and mergekit exports of a GPT-NeoX model.
SCRIPT = """
import json, sys
from pathlib import Path
import numpy as np, torch
from safetensors.torch import load_file
import hyper_es as hx
from hyper_es.export import export_hf, export_mergekit
from hyper_es.merging import MergeSettings, genome_for

pkg, base, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
assert Path(hx.__file__).parent == pkg / "hyper_es", hx.__file__
ds = hx.DirectionSet.from_adapters(base, sys.argv[4:])
genome = genome_for(ds, module_groups=True)
x = np.random.default_rng(0).uniform(-1, 2, genome.size)
settings = MergeSettings()
(out / "genome.json").write_text(genome.to_json(x))
base_sd = load_file(str(Path(base) / "model.safetensors"))
one = hx.merge(base_sd, ds, {ds.names[0]: 1.0, ds.names[1]: 0.0})
assert all(torch.equal(one[t], base_sd[t] + ds.delta(0, t)) for t in ds.tensor_names())
export_hf(ds, genome, x, settings, out / "hf")
export_mergekit(ds, genome, x, settings, out / "merge.yaml")
print(json.dumps({t: genome.key_for(t, ds.names[0]) for t in ds.tensor_names()}))
"""


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_adding_a_family_is_dropping_one_json_file(tiny_path, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from hyper_es.merging.core import combine

    base = tiny_model(tmp_path / "neox", tiny_path, "neox")
    with pytest.raises(HyperESError, match="GPTNeoXForCausalLM.*no JSON file in .*architectures"):
        architectures.for_model(base)  # the repo's own table does not know the family
    adapters = []
    for k in range(2):
        torch.manual_seed(k)
        peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                                    LoraConfig(r=2, lora_alpha=4, target_modules=["query_key_value", "dense_h_to_4h"]))
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.05)
        peft_model.save_pretrained(tmp_path / f"d{k}")
        adapters.append(str(tmp_path / f"d{k}"))

    copy = tmp_path / "pkg"
    shutil.copytree(PKG, copy / "hyper_es", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "hyper_es" / "architectures" / "gpt_neox.json").write_text(json.dumps(NEOX, indent=1))
    changed = _files(copy / "hyper_es") ^ _files(PKG)
    same = [f for f in _files(PKG) if filecmp.cmp(PKG / f, copy / "hyper_es" / f, shallow=False)]
    assert changed == {"architectures/gpt_neox.json"} and len(same) == len(_files(PKG))  # only that file changes

    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.pop("HYPER_ES_ARCHITECTURES", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(copy), str(base), str(out), *adapters], cwd=copy,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    keys = json.loads(proc.stdout.strip().splitlines()[-1])
    assert keys == {f"gpt_neox.layers.{i}.{m}.weight": [f"L{i}", "d0", g] for i in range(3)
                    for m, g in (("attention.query_key_value", "attention"), ("mlp.dense_h_to_4h", "mlp"))}

    # Check the exports against the genome's values without the family's table.
    data = json.loads((out / "genome.json").read_text())
    assert data["genome"]["architecture"] == "gpt_neox"
    with pytest.raises(HyperESError, match=f"family 'gpt_neox': no gpt_neox.json in {PKG / 'architectures'}; add"):
        Genome.from_json(out / "genome.json")
    values = data["values"]
    ds = hx.DirectionSet.from_adapters(str(base), adapters)
    base_sd, merged = load_file(str(base / "model.safetensors")), load_file(str(out / "hf" / "model.safetensors"))
    for t in base_sd:
        if t not in keys:
            assert torch.equal(merged[t], base_sd[t]), t
            continue
        layer, _, group = keys[t]
        w = torch.tensor([values[f"{layer}/{d}/{group}"] for d in ds.names])
        delta = combine(torch.stack([ds.delta(k, t) for k in range(2)]), w, ties=True, consensus="sum",
                        normalize=False, lam=1.0)
        torch.testing.assert_close(merged[t], base_sd[t] + delta, rtol=0, atol=1e-6)
    config = yaml.safe_load((out / "merge.yaml").read_text())
    for d, model in zip(ds.names, config["models"]):
        assert model["model"].endswith(f"+{Path(adapters[ds.names.index(d)]).resolve()}")
        assert model["parameters"]["weight"] == [
            {"filter": f, "value": [values[f"L{i}/{d}/{g}"] for i in range(3)]}
            for g, f in (("attention", ".attention."), ("mlp", ".mlp."))
        ] + [{"value": [0.0] * 3}]  # "other" touches no tensor of these directions: no genes, 0 in the YAML
    assert not any(k.endswith("/other") for k in values)


@pytest.mark.integration
@pytest.mark.vllm
def test_vllm_inplace_gpt2_equals_hf(gpt2_path, tmp_path):
    """GPT-2 in vLLM: Conv1D weights are stored transposed (`vllm_transposed`), c_attn is fused already."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    from hyper_es import models
    from hyper_es.engine import Sampling
    from hyper_es.engine.hf_resident import HFResident
    from hyper_es.engine.sources import MergeSource, MergeWeights
    from hyper_es.engine.vllm_resident import VLLMResident
    from hyper_es.merging import MergePlan
    from hyper_es.tasks import get_task

    base = load_file(str(gpt2_path / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    touched = [t for t in base if t.startswith("transformer.h.") and t.endswith(("c_attn.weight", "c_proj.weight",
                                                                                  "c_fc.weight"))]
    ds = hx.DirectionSet.from_dicts(str(gpt2_path), {n: {t: 0.5 * torch.randn(base[t].shape, generator=gen)
                                                         for t in touched} for n in ("a", "b")})
    genome, settings = genome_for(ds, layer_group_size=2, module_groups=True), MergeSettings(density=0.7, seed=2)
    tok = AutoTokenizer.from_pretrained(gpt2_path)
    task = get_task("countdown")
    prompts, s = task.prompt_ids(tok, task.rows("test")[:8]), Sampling(max_tokens=12)
    x = np.random.default_rng(0).uniform(-1, 2, genome.size)
    engine = VLLMResident(gpt2_path, tok, MergeWeights(ds, genome, settings), tmp_path / "work", dtype="float32", max_model_len=512)
    try:
        base_out = engine.generate(prompts, s)
        engine.set_genome(x)
        got = engine.generate(prompts, s)
    finally:
        engine.close()
    # The same candidate merged into HF's GPT-2 (Conv1D as HF stores it): fp32 greedy agrees with vLLM's.
    hf = HFResident(*models.load(str(gpt2_path), dtype="float32"), MergeSource(MergePlan(ds, genome, settings)))
    hf.set_genome(x)
    assert got == hf.generate(prompts, s) != base_out
    assert got != base_out
