"""HF in-place evaluator: rewriting a resident model equals loading the merged model; restore gives the base."""

import numpy as np
import torch

import hyper_es as hx
from hyper_es.evaluate import Sampling
from hyper_es.engine.hf import HFGenerator
from hyper_es.merging import MergePlan, MergeSettings, genome_for
from hyper_es.engine.hf_resident import HFResident
from hyper_es.engine.sources import MergeSource
from hyper_es.tasks import get_task


def test_inplace_matches_fresh_merged_model_and_restores(tiny_path):
    from hyper_es import models

    model, tok = models.load(str(tiny_path))
    base_sd = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    linear = [t for t in base_sd if t.endswith(("q_proj.weight", "down_proj.weight"))]
    ds = hx.DirectionSet.from_dicts(str(tiny_path), {n: {t: 0.2 * torch.randn(base_sd[t].shape, generator=gen)
                                                         for t in linear} for n in ("a", "b")})
    genome = genome_for(ds, layer_group_size=2)
    plan = MergePlan(ds, genome, MergeSettings(density=0.6, seed=1))
    inplace = HFResident(model, tok, MergeSource(plan))
    task = get_task("chain_sum")
    prompts = task.prompt_ids(tok, task.rows("test")[:6])
    s = Sampling(max_tokens=10)
    base_out = inplace.generate(prompts, s)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.uniform(-1, 2, genome.size)
        inplace.set_genome(x)
        fresh, _ = models.load(str(tiny_path))
        fresh.load_state_dict(plan.apply(base_sd, x))
        assert inplace.generate(prompts, s) == HFGenerator(fresh, tok).generate(prompts, s)
    inplace.restore()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in base_sd.items())
    assert inplace.generate(prompts, s) == base_out


def test_scorer_sampled_fitness_scores_every_sample(tiny_path):
    """fitness.samples > 1: each prompt gets n completions at the temperature, and the fitness averages them all."""
    from hyper_es import models
    from hyper_es.recipe import TaskConfig
    from hyper_es.fitness import Scorer
    from hyper_es.tasks import Task

    model, tok = models.load(str(tiny_path))
    sd = model.state_dict()
    ds = hx.DirectionSet.from_dicts(str(tiny_path), {"a": {"model.layers.0.mlp.down_proj.weight":
                                                           0.1 * torch.ones_like(sd["model.layers.0.mlp.down_proj.weight"])}})
    genome = genome_for(ds)
    task = Task(TaskConfig(name="chain_sum", test={"source": "builtin", "name": "chain_sum_test"}, max_tokens=8,
                           reward="dense_reward:digit_fraction"))
    rows = {task.name: task.rows("test")[:4]}
    calls = []
    engine = HFResident(model, tok, MergeSource(MergePlan(ds, genome)), batch_size=4)
    real = engine.generate_groups
    engine.generate_groups = lambda groups: calls.append([s for _, s in groups]) or real(groups)
    scorer = Scorer(engine, tok, [task])
    greedy = scorer.score(genome.uniform(0.5), rows)
    sampled = scorer.score(genome.uniform(0.5), rows, samples=3, temperature=1.0, seed=7)
    assert calls[0][0].greedy and calls[1][0].n == 3 and calls[1][0].temperature == 1.0 and calls[1][0].seed == 7
    assert sampled.tokens > greedy.tokens and 0 <= sampled.reward <= 1
