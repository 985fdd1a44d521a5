"""`analyze scale-fit`: the least-squares scale of a reference update, its cosine and the unexplained share."""

import math

import pytest
import torch

from hyper_es import architectures
from hyper_es.analyze.scale_fit import blocks, fit


def test_fit_is_the_hand_computed_projection():
    r = {"a": torch.tensor([1.0, 0.0]), "b": torch.tensor([[2.0]])}  # ‖R‖² = 5
    e = {"a": torch.tensor([0.0, 3.0]), "c": torch.tensor([4.0])}  # orthogonal to R, ‖E‖² = 25
    u = {"a": 2 * r["a"] + e["a"], "b": 2 * r["b"], "c": e["c"]}  # U = 2R + E: ⟨U, R⟩ = 10, ‖U‖² = 45
    got = fit(u, r)
    assert got["scale"] == pytest.approx(2.0)
    assert got["cosine"] == pytest.approx(10 / math.sqrt(45 * 5))
    assert got["unexplained"] == pytest.approx(25 / 45)  # ‖E‖² / ‖U‖²
    assert got["norm"] == pytest.approx(math.sqrt(45)) and got["reference_norm"] == pytest.approx(math.sqrt(5))
    assert fit(r, r)["scale"] == pytest.approx(1.0) and fit(r, r)["unexplained"] == pytest.approx(0.0)
    assert fit(u, r, ["c"])["scale"] is None  # R is zero there: no scale to fit


def test_blocks_group_consecutive_layers_and_keep_the_rest_apart():
    arch = architectures.get("llama")
    names = [f"model.layers.{i}.mlp.up_proj.weight" for i in (0, 1, 2, 4)] + ["lm_head.weight"]
    got = blocks(names, arch, 2)
    assert list(got) == ["L0-1", "L2-2", "L4-4", "other"]
    assert got["L0-1"] == ["model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"]
    assert got["other"] == ["lm_head.weight"]
