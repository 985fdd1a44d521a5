import re

import pytest

from hyper_es import models


def test_tiny_random_is_cached_and_deterministic(tiny_path, tmp_path):
    assert models.resolve("tiny-random") == tiny_path
    from hyper_es.models import tiny

    other = tiny.build(tmp_path / "again")
    a = (tiny_path / "model.safetensors").read_bytes()
    assert a == (other / "model.safetensors").read_bytes()


def test_tiny_random_loads_with_a_chat_template(tiny):
    model, tok = tiny
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_local_folder_is_used_as_is(tiny_path):
    assert models.resolve(str(tiny_path)) == tiny_path


@pytest.mark.parametrize("name,message", [
    ("not-a-model", "not a built-in (tiny-random, smollm2-135m-instruct) or a hub id"),
    ("./missing/dir", "no such folder"),
])
def test_unknown_names_give_a_clear_error(name, message):
    with pytest.raises(models.ModelNotFoundError, match=re.escape(message)):
        models.resolve(name)


def test_folder_without_config(tmp_path):
    with pytest.raises(models.ModelNotFoundError, match="has no config.json"):
        models.resolve(str(tmp_path))


def test_hub_id_offline_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(models.ModelNotFoundError, match="not in the local HF cache and HF_HUB_OFFLINE is set"):
        models.resolve("someorg/somemodel")
    with pytest.raises(models.ModelNotFoundError, match="not in the local HF cache"):  # a dot is not a file suffix
        models.resolve("Qwen/Qwen2.5-0.5B-Instruct")


def test_hub_id_unreachable_says_so(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: a fast, local refusal
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "2")
    with pytest.raises(models.ModelNotFoundError, match="the hub could not be reached"):
        models.resolve("someorg/somemodel")
