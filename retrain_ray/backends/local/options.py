"""The built-in local backend (PyTorch/PEFT in the run's process or a Ray worker): its spec, capabilities
and `[backend.options]` schema.

The local schema keeps the original's names so its files load; the local backend reads the ones it
implements through `resolved_options`; the others (inert_options.py) load with a note, or are refused where
a value would change what is learned.
The policy is built by the run's engine's factory (engines/registry.py) on the local trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrain_ray.config.errors import ConfigIssue

from retrain_ray.backends.local.inert_options import INERT_OPTIONS, inert_note, inert_problem
from retrain_ray.backends.types import BackendCapabilities, OptionsTable, issue
from retrain_ray.models.lean_support import model_impl_problem

LOCAL_OPTIONS: dict[str, object] = {
    # acted on by the local backend (backends/local/policy.py: settings_from_config)
    "train_microbatch_size": 0,
    # "auto": on when the model trains on a GPU, off on CPU (issue 13: there it only trades a recompute,
    # about a fifth of a tiny-model step, for host memory; results are identical either way)
    "gradient_checkpointing": "auto",
    "gradient_checkpointing_use_reentrant": "auto",
    "lora_target_modules": "",
    "lora_layers_to_transform": "",
    "lora_layers_pattern": "layers",
    "lora_freeze_a": False,
    "trust_remote_code": False,
    # "auto": the torch-only lean Llama wherever it reproduces the model (models/lean_support.py), else
    # transformers; "lean" refuses a model it cannot reproduce; "transformers": transformers and PEFT always
    "model_impl": "auto",
    "strict_deterministic": False,
    # the original's memory/speed switches retrain-ray does not act on (inert_options.py)
    **{key: option.default for key, option in INERT_OPTIONS.items()},
}
"""The original's local options (its 0.3.0 schema, its defaults). The first group acts; the rest load with
a note saying why they change nothing here, or are refused where a value would change what is learned
(`INERT_OPTIONS`)."""

USE_REENTRANT_CHOICES = ("auto", "true", "false")


BOOL_OR_AUTO = frozenset({"gradient_checkpointing"})
"""Local options that take true, false or "auto"."""


def _local_value(key: str, value: object) -> list[ConfigIssue]:
    loc = f"backend.options.{key}"
    if key in INERT_OPTIONS:
        problem = inert_problem(key, value)
        return [issue(loc, value, *problem)] if problem else []
    if key == "gradient_checkpointing_use_reentrant" and str(value).lower() not in USE_REENTRANT_CHOICES:
        return [issue(loc, value, "must be auto, true or false", "default is 'auto'")]
    if key == "model_impl" and model_impl_problem(value) is not None:
        return [issue(loc, value, str(model_impl_problem(value)), 'default is "auto"')]
    if key == "lora_layers_to_transform" and not all(p.strip().isdigit() for p in str(value).split(",") if p.strip()):
        return [issue(loc, value, "must be a comma list of layer indices", 'e.g. "0,1,2"')]
    return []


CAPABILITIES = BackendCapabilities(reports_sync_loss=True, preserves_token_advantages=True,
                                   supports_checkpoint_resume=True, resume_runtime_dependent=False,
                                   checkpoint_resume_mode="exact")

def _local_note(key: str, value: object) -> str | None:
    return inert_note(key, value) if key in INERT_OPTIONS else None


OPTIONS = OptionsTable(lambda options: LOCAL_OPTIONS, bool_or_auto=BOOL_OR_AUTO, key_issues=_local_value,
                       key_notes=_local_note)
