"""Full-parameter ES core: seeded per-tensor noise, normalisation, σ schedules, the update and replay."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from hyper_es.es import apply_update, member_seeds, noise, normalise, perturb, sigma_at
from hyper_es.es.noise import WINDOW, add_noise, noise_into, noise_table, perturbed, windows
from hyper_es.es.update import signs


@pytest.mark.parametrize("kind", ["table", "generator"])
def test_noise_is_bitwise_the_same_in_another_process(kind):
    here = noise(1234, "model.layers.0.mlp.down_proj.weight", (64, 48), kind=kind)
    code = ("import sys, torch; from hyper_es.es import noise; "
            f"e = noise(1234, 'model.layers.0.mlp.down_proj.weight', (64, 48), kind='{kind}'); "
            "sys.stdout.buffer.write(e.numpy().tobytes())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    assert out == here.numpy().tobytes()


@pytest.mark.parametrize("kind", ["table", "generator"])
def test_two_same_shaped_tensors_get_different_noise(kind):
    a = noise(7, "model.layers.0.self_attn.q_proj.weight", (32, 32), kind=kind)
    b = noise(7, "model.layers.0.self_attn.o_proj.weight", (32, 32), kind=kind)
    c = noise(8, "model.layers.0.self_attn.q_proj.weight", (32, 32), kind=kind)
    assert not torch.equal(a, b) and not torch.equal(a, c)
    assert abs(float((a * b).mean())) < 0.1 and abs(float(a.std()) - 1) < 0.1


def test_threaded_noise_is_bitwise_the_serial_noise():
    """Members and updates with noise generated ahead on 3 threads equal the one-thread result bitwise, in order;
    a member is θ + s·ε by one fused multiply-add, and the update is unchanged by threads."""
    shapes = {f"layers.{i}.w": (40 + i, 30) for i in range(7)}
    master = {n: torch.randn(s) for n, s in shapes.items()}
    serial = list(perturbed(master, 9, 0.01, "generator", workers=1))
    threaded = list(perturbed(master, 9, 0.01, "generator", workers=3))
    assert [n for n, _ in serial] == [n for n, _ in threaded] == list(master)
    for (n, a), (_, b) in zip(serial, threaded):
        assert torch.equal(a, b)
        assert torch.equal(a, torch.add(master[n], noise(9, n, shapes[n]), alpha=0.01))
        assert torch.allclose(a, master[n] + 0.01 * noise(9, n, shapes[n]), atol=1e-7)
    assert torch.equal(noise_into(torch.empty(5, 4), 3, "x"), noise(3, "x", (5, 4)))
    for n, w in perturbed(master, 9, 0.01):  # the table (default): the same fused multiply-add of table noise
        assert torch.equal(w, torch.add(master[n], noise(9, n, shapes[n], kind="table"), alpha=0.01))
    before = torch.get_num_threads()
    for kind in ("generator", "table"):
        one, many = ({n: w.clone() for n, w in master.items()} for _ in range(2))
        try:
            for params, n in ((one, 1), (many, 3)):
                torch.set_num_threads(n)
                apply_update(params, [1, 2, 3], [0.5, -1.0, 0.25], 0.1, 0.01, kind=kind)
        finally:
            torch.set_num_threads(before)
        assert all(torch.equal(one[n], many[n]) for n in master)


def test_table_noise_is_windows_of_the_shared_table():
    """A tensor longer than a window reads several windows, each at its own hashed offset; a member written in
    place (out = w) equals the fresh one."""
    table, numel = noise_table(), WINDOW + 5
    (s0, n0, o0), (s1, n1, o1) = windows(3, "big", numel)
    assert (s0, n0, s1, n1) == (0, WINDOW, WINDOW, 5) and o0 != o1
    eps = noise(3, "big", (numel,), kind="table")
    assert torch.equal(eps[:WINDOW], table[o0:o0 + WINDOW]) and torch.equal(eps[WINDOW:], table[o1:o1 + 5])
    assert abs(float(table.mean())) < 1e-3 and abs(float(table.std()) - 1) < 1e-3
    w = torch.randn(numel)
    fresh = add_noise(torch.empty(numel), w, 3, "big", 0.5, "table")
    assert torch.equal(fresh, torch.add(w, eps, alpha=0.5)) and torch.equal(add_noise(w, w, 3, "big", 0.5, "table"), fresh)
    with pytest.raises(ValueError, match="unknown noise kind"):
        noise(3, "big", (4,), kind="philox")


def test_member_seeds_antithetic_pairs_share_a_seed():
    s = member_seeds(0, 3, 6, antithetic=True)
    assert s[0] == s[1] and s[2] == s[3] and len(set(s)) == 3
    assert member_seeds(0, 3, 6) == member_seeds(0, 3, 6) != member_seeds(0, 4, 6)
    with pytest.raises(ValueError, match="even"):
        member_seeds(0, 0, 5, antithetic=True)


def test_normalisations_match_hand_computed_values():
    r = [1.0, 0.0, 0.0, 3.0]
    z = normalise(r, "zscore")
    mean, std = 1.0, np.sqrt((0 + 1 + 1 + 4) / 4)
    assert np.allclose(z, [(1 - mean) / std, -1 / std, -1 / std, 2 / std])
    assert np.allclose(normalise(r, "centred_rank"), [2 / 3 - 0.5, 0.5 / 3 - 0.5, 0.5 / 3 - 0.5, 0.5])
    assert np.allclose(normalise(r, "none"), r)
    assert np.all(normalise([2.0, 2.0], "zscore") == 0)


@pytest.mark.parametrize("kind", ["table", "generator"])
def test_update_matches_the_hand_computed_step(kind):
    theta = {"w": torch.zeros(5, 3), "b": torch.ones(4)}
    seeds, rewards, sigma, alpha = [11, 22, 33], [1.0, 0.0, 2.0], 0.1, 0.05
    z = normalise(rewards, "zscore")
    want = {n: t.clone() + sum(alpha / (3 * sigma) * zi * noise(s, n, t.shape, kind=kind) for s, zi in zip(seeds, z))
            for n, t in theta.items()}
    apply_update(theta, seeds, z, sigma, alpha, kind=kind)
    for n in theta:
        assert torch.allclose(theta[n], want[n], atol=1e-6)


def test_antithetic_update_is_the_two_point_difference():
    theta = {"w": torch.zeros(6)}
    seeds, sg = member_seeds(5, 0, 4, antithetic=True), signs(4, True)
    z = [1.0, -1.0, 0.5, 0.5]  # pair 1: + beats −; pair 2: equal, so it cancels
    apply_update(theta, seeds, z, 0.2, 0.1, sg)
    want = 0.1 / (4 * 0.2) * (1.0 - (-1.0)) * noise(seeds[0], "w", (6,))
    assert torch.allclose(theta["w"], want, atol=1e-7)


@pytest.mark.parametrize("kind,antithetic,noise_kind", [("zscore", False, "generator"), ("centred_rank", False, "generator"),
                                                        ("zscore", True, "generator"), ("zscore", False, "table")])
def test_es_solves_a_toy_objective(kind, antithetic, noise_kind):
    target = torch.linspace(-1, 1, 20)
    theta = {"x": torch.zeros(20)}

    def reward(x):
        return -float(((x - target) ** 2).sum())

    start = reward(theta["x"])
    for it in range(150):
        seeds, sg = member_seeds(0, it, 16, antithetic=antithetic), signs(16, antithetic)
        sigma = sigma_at(it, 150, 0.1, kind="cosine", sigma_min=0.05, warmup=5)
        rewards = []
        for s, si in zip(seeds, sg):
            perturb(theta, s, si * sigma, noise_kind)
            rewards.append(reward(theta["x"]))
            perturb(theta, s, -si * sigma, noise_kind)
        apply_update(theta, seeds, normalise(rewards, kind), sigma, 0.005, sg, kind=noise_kind)
    assert reward(theta["x"]) > 0.01 * start  # within 1% of the start's squared error


@pytest.mark.parametrize("kind", ["table", "generator"])
def test_replay_rebuilds_the_weights_bitwise(kind):
    torch.manual_seed(0)
    theta0 = {"a": torch.randn(8, 8), "b": torch.randn(3)}
    theta = {n: t.clone() for n, t in theta0.items()}
    history = []
    for it in range(4):
        seeds = member_seeds(9, it, 6)
        z = normalise(np.random.default_rng(it).random(6), "zscore")
        apply_update(theta, seeds, z, 0.05, 0.01, kind=kind)
        history.append((seeds, z.tolist()))
    replay = {n: t.clone() for n, t in theta0.items()}
    for seeds, z in history:  # z stored as JSON floats: float64 round-trips exactly
        apply_update(replay, seeds, z, 0.05, 0.01, kind=kind)
    assert all(torch.equal(replay[n], theta[n]) for n in theta)


def test_sigma_schedules():
    assert sigma_at(0, 10, 0.1) == sigma_at(9, 10, 0.1) == 0.1
    assert sigma_at(0, 11, 0.1, kind="linear", sigma_min=0.0) == 0.1
    assert sigma_at(10, 11, 0.1, kind="linear", sigma_min=0.0) == pytest.approx(0.0)
    assert sigma_at(5, 11, 0.1, kind="linear") == pytest.approx(0.05)
    assert sigma_at(0, 11, 0.1, kind="cosine", sigma_min=0.01, warmup=2) == pytest.approx(0.01 + 0.09 / 3)
    assert sigma_at(2, 11, 0.1, kind="cosine", sigma_min=0.01, warmup=2) == pytest.approx(0.1)
    assert sigma_at(10, 11, 0.1, kind="cosine", sigma_min=0.01, warmup=2) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="unknown sigma schedule"):
        sigma_at(0, 1, 0.1, kind="step")
