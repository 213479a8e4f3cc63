"""Our two stand-ins (no real server of either runs here) against the real protocols' documented shapes,
recorded in tests/fixtures/protocols/ from the upstream source and docs (each fixture names the files and
commits): PRIME-RL's trainer (retrain_ray/backends/prime_rl/standin.py, and our wire module) and the Tinker
service (retrain_ray/backends/tinker/standin.py, and the installed tinker SDK the backend calls). A drift
between a stand-in (or our reading of a protocol) and the recorded shapes fails here, naming the field."""

from __future__ import annotations

import inspect
import json
import time
import typing
from pathlib import Path

import httpx
import msgpack
import msgspec
import numpy as np
import pytest

from retrain_ray.backends.prime_rl import wire
from retrain_ray.backends.types import SFTLoss

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "protocols"
PRIME_RL = json.loads((FIXTURES / "prime_rl.json").read_text())
TINKER = json.loads((FIXTURES / "tinker.json").read_text())


# ---- PRIME-RL ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PRIME_RL["structs"]))
def test_our_wire_structs_declare_prime_rls_fields_in_its_order(name):
    recorded = PRIME_RL["structs"][name]
    ours = getattr(wire, name)
    fields = msgspec.structs.fields(ours)
    assert [f.name for f in fields] == [f[0] for f in recorded["fields"]]
    assert [f.required for f in fields] == [f[2] == "required" for f in recorded["fields"]]
    assert all(f.default is None for f in fields if not f.required)
    config = ours.__struct_config__
    assert (config.array_like, config.omit_defaults) == (recorded["options"]["array_like"],
                                                         recorded["options"]["omit_defaults"])


def _documented_sample(n: int, advantage: float) -> list[object]:
    """A TrainingSample as PRIME-RL's msgspec struct puts it on the wire: an array of its fields in
    declaration order, the optional ones it does not set nil (msgspec writes every field of an array-like
    struct, `omit_defaults` notwithstanding, and fills missing trailing fields with their defaults)."""
    fields = [f[0] for f in PRIME_RL["structs"]["TrainingSample"]["fields"]]
    values: dict[str, object] = {"token_ids": list(range(1, n + 1)), "mask": [False, False] + [True] * (n - 2),
                                 "logprobs": [0.0, 0.0] + [-1.5] * (n - 2), "temperatures": [1.0] * n,
                                 "env_name": "retrain", "advantages": [0.0, 0.0] + [advantage] * (n - 2)}
    return [values.get(f) for f in fields]


def test_a_batch_we_encode_is_the_array_prime_rl_decodes():
    sample = wire.TrainingSample(token_ids=[1, 2, 3, 4], mask=[False, False, True, True],
                                 logprobs=[0.0, 0.0, -1.5, -1.5], temperatures=[1.0] * 4, env_name="retrain",
                                 advantages=[0.0, 0.0, 0.5, 0.5])
    encoded = wire.encode_batch(wire.TrainingBatch(examples=[sample], step=3))
    assert msgpack.unpackb(encoded) == [[_documented_sample(4, 0.5)], 3, None]  # run_idx: nil
    assert wire.decode_batch(msgpack.packb([[_documented_sample(4, 0.5)], 3])).run_idx is None  # or left out


def test_our_paths_are_prime_rls_layout(tmp_path):
    layout = PRIME_RL["layout"]
    assert wire.rollout_file(tmp_path, 7) == tmp_path / layout["batch_file"].format(step=7)
    assert wire.broadcast_dir(tmp_path, 2) == tmp_path / layout["broadcast_dir"].format(version=2)
    assert wire.STABLE_MARKER == layout["stable_marker"]
    sender = wire.FileSystemSender(tmp_path)
    sender.send(wire.TrainingBatch(examples=[], step=0))
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.bin*")] == [layout["batch_file"].format(step=0)]


def test_the_prime_rl_stand_in_takes_a_documented_batch_and_update(tmp_path, tiny_cache):
    """The stand-in is fed only what the fixture documents: a batch file written by hand with msgpack,
    then PRIME-RL's `/update_weights` JSON for the broadcast it must mark STABLE."""
    from retrain_ray.backends.prime_rl.standin import PrimeRLStandin

    layout = PRIME_RL["layout"]
    standin = PrimeRLStandin(tmp_path, "builtin:tiny", cache_dir=str(tiny_cache))
    try:
        batch_file = tmp_path / layout["batch_tmp_file"].format(step=0)
        batch_file.parent.mkdir(parents=True)
        batch_file.write_bytes(msgpack.packb([[_documented_sample(5, 1.0), _documented_sample(5, -1.0)], 0]))
        batch_file.rename(tmp_path / layout["batch_file"].format(step=0))
        marker = tmp_path / layout["broadcast_dir"].format(version=1) / layout["stable_marker"]
        deadline = time.monotonic() + 60
        while not marker.exists() and standin.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert standin.error is None and marker.exists() and standin.trained_steps == [0]
        update = PRIME_RL["update_weights"]
        body = {key: str(marker.parent) for key in update["json_keys"]}
        answer = httpx.request(update["method"], standin.url + update["path"], json=body, timeout=30)
        assert answer.status_code == 200, answer.text
    finally:
        standin.close()


# ---- Tinker --------------------------------------------------------------------------------------------
def _standin_client(tmp_path: Path, tiny_cache: Path):
    from retrain_ray.backends.tinker.standin import StandinServiceClient

    service = StandinServiceClient(store_dir=tmp_path / "store", cache_dir=tiny_cache)
    return service, service.create_lora_training_client(base_model="builtin:tiny", rank=4).result()


@pytest.mark.parametrize("qualified", sorted(TINKER["methods"]))
def test_every_sdk_call_we_make_exists_in_the_sdk_and_the_stand_in(qualified):
    """The installed tinker SDK (the real client) and the stand-in both take the documented arguments."""
    tinker = pytest.importorskip("tinker", reason="the tinker SDK is not installed: pip install 'retrain-ray[tinker]'")
    from retrain_ray.backends.tinker import standin

    owner, method = qualified.split(".")
    arguments = TINKER["methods"][qualified]
    real = inspect.signature(getattr(getattr(tinker, owner), method)).parameters
    ours = inspect.signature(getattr(getattr(standin, f"Standin{owner}"), method)).parameters
    assert set(arguments) <= set(real), f"tinker.{qualified} takes {list(real)}"
    assert set(arguments) <= set(ours) or any(p.kind is p.VAR_KEYWORD for p in ours.values()), list(ours)


def test_the_losses_we_send_are_documented():
    from retrain_ray.backends.tinker import backend

    documented = set(TINKER["losses"])
    assert set(typing.get_args(SFTLoss)) <= documented
    assert '"importance_sampling"' in inspect.getsource(backend) and "importance_sampling" in documented


def _datum(loss: str, tokens: list[int]):
    from tinker import types

    from retrain_ray.backends.tinker.loss import tensor

    n = len(tokens) - 1
    values = {"target_tokens": tokens[1:], "weights": [0.0] + [1.0] * (n - 1), "logprobs": [-2.0] * n,
              "advantages": [0.5] * (n - 1) + [-1.0]}
    inputs = {k: tensor(values[k], "int64" if kind == "int" else "float32")
              for k, kind in TINKER["losses"][loss]["inputs"].items()}
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs), values


@pytest.mark.parametrize("loss", sorted(TINKER["losses"]))
def test_the_tinker_stand_in_computes_each_documented_loss(loss, tmp_path, tiny_cache):
    """Documented inputs in, documented outputs and diagnostics out, and the documented formula's value
    from the target logprobs the stand-in returns."""
    pytest.importorskip("tinker", reason="the tinker SDK is not installed: pip install 'retrain-ray[tinker]'")
    _, client = _standin_client(tmp_path, tiny_cache)
    datum, values = _datum(loss, [1, 5, 6, 7, 8])
    out = client.forward_backward([datum], loss_fn=loss).result()
    documented = TINKER["losses"][loss]
    assert set(out.metrics) >= set(documented["diagnostics"])
    (outputs,) = out.loss_fn_outputs
    assert set(outputs) == set(documented["outputs"])
    target = np.asarray(outputs["logprobs"].tolist(), dtype=np.float64)
    assert target.shape == (datum.model_input.length,)  # every tensor is (N,), N = model_input.length
    if loss == "cross_entropy":
        expected = -(target * np.asarray(values["weights"])).sum()
    else:
        ratio = np.exp(target - np.asarray(values["logprobs"]))
        expected = -(ratio * np.asarray(values["advantages"])).sum()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)


def test_tinker_save_paths_are_documented_uris_that_a_new_client_loads(tmp_path, tiny_cache):
    pytest.importorskip("tinker", reason="the tinker SDK is not installed: pip install 'retrain-ray[tinker]'")
    service, client = _standin_client(tmp_path, tiny_cache)
    prefix = TINKER["save_paths"]["prefix"]
    state = client.save_state(name="0010").result().path
    sampler = client.save_weights_for_sampler(name="0010s").result().path
    assert state.startswith(prefix) and state.endswith("/0010") and sampler.startswith(prefix)
    fresh = service.create_lora_training_client(base_model="builtin:tiny", rank=4).result()
    fresh.load_state_with_optimizer(state).result()  # persistent: a new client resumes from it
