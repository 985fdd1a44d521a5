import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "helpers"))  # test-only rewards, importable as `dense_reward:...`
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)  # a vLLM engine or reward worker shares the two cores


@pytest.fixture(scope="session")
def tiny_path():
    from hyper_es import models

    return models.resolve("tiny-random")


@pytest.fixture(scope="session")
def tiny(tiny_path):
    from hyper_es import models

    return models.load(str(tiny_path))
