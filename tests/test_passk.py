import itertools
import random

import pytest

from hyper_es.evaluate import mean_pass_at_k, pass_at_k


def brute_force(n: int, c: int, k: int) -> float:
    """Enumerate every k-subset of n samples (c correct) and count those with a correct one."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 10])
def test_matches_brute_force(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12)


def test_pass1_is_fraction_correct_and_large_n_is_stable():
    assert pass_at_k(200, 37, 1) == pytest.approx(37 / 200)
    assert 0.0 <= pass_at_k(10_000, 3, 100) <= 1.0
    assert pass_at_k(10_000, 0, 100) == 0.0


def test_mean_over_problems():
    rng = random.Random(0)
    counts = [(8, rng.randint(0, 8)) for _ in range(20)]
    for k in (1, 4, 8):
        assert mean_pass_at_k(counts, k) == pytest.approx(sum(brute_force(n, c, k) for n, c in counts) / 20)


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
