"""Shared fixtures. One Ray per test session, fake GPUs by default, everything offline.

The tests live in folders that mirror retrain_ray's packages (tests/run/ for retrain_ray/run/, ...), plus
tests/project/ for the whole-package checks (layers, docs map, packaging, contracts). The tests of
retrain_ray/plugins/ are in tests/plugin_loading/: a folder named `plugins` on the test path would shadow the
`plugins` package of the default `[plugins] search_paths` that the plugin tests install in their working
directory. Helpers shared across folders (helpers.py, campaign_helpers.py, ...) stay here, at tests/, which
pytest puts on sys.path for this conftest; fixture files are under tests/fixtures/.
"""

from __future__ import annotations

import copy
import os

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "0")

import pytest  # noqa: E402


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_addoption(parser):
    parser.addoption(
        "--extended",
        action="store_true",
        help="also run the tests marked `extended` (long campaigns, fault loops); `make test-extended`",
    )


def pytest_collection_modifyitems(config, items):
    _deselect_extended(config, items)
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def _deselect_extended(config, items):
    """The default suite stays under 15 minutes; `extended` tests run with --extended (CI runs both)."""
    if config.getoption("--extended") or config.getoption("-m"):
        return
    extended = [item for item in items if "extended" in item.keywords]
    if extended:
        config.hook.pytest_deselected(items=extended)
        items[:] = [item for item in items if "extended" not in item.keywords]


@pytest.fixture(scope="session", autouse=True)
def _torch_single_thread():
    """With 2 threads under CPU contention latency spikes 20x (DESIGN.md)."""
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    """A model cache holding `builtin:tiny`, built once per session: pass it as `cache_dir`."""
    from retrain_ray.models import resolve_model_path

    cache = tmp_path_factory.mktemp("models")
    resolve_model_path("builtin:tiny", cache)
    return cache


@pytest.fixture(scope="session")
def tiny_dir(tiny_cache):
    """The folder of `builtin:tiny` (model and tokenizer files). Read it, do not write to it."""
    from retrain_ray.models import resolve_model_path

    return resolve_model_path("builtin:tiny", tiny_cache)


@pytest.fixture(scope="session")
def _tiny_loaded(tiny_cache):
    from retrain_ray.models import load_model_and_tokenizer

    return load_model_and_tokenizer("builtin:tiny", cache_dir=tiny_cache)


@pytest.fixture
def tiny(_tiny_loaded):
    """`builtin:tiny` loaded once per session: (model, tokenizer). The model is a deep copy per test, as
    tests change its weights and its train/eval mode; the tokenizer is shared (tests only read it)."""
    model, tok = _tiny_loaded
    return copy.deepcopy(model), tok


@pytest.fixture(scope="session")
def ray_4cpu_4gpu():
    """A local Ray with 4 CPUs and 4 fake GPUs, shared by every test of the session."""
    import ray

    if ray.is_initialized():
        yield ray
        return
    ray.init(
        address="local",
        num_cpus=4,
        num_gpus=4,
        include_dashboard=False,
        object_store_memory=300 * 2**20,
        log_to_driver=False,
        namespace="retrain-ray-tests",
    )
    yield ray
    ray.shutdown()
