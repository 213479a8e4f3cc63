"""What a model name says about how it loads, without importing torch (the campaign driver asks).

`lean_applies`: a built-in model (`builtin:...`) runs on the torch-only lean Llama, and LoRA on it is
the lean LoRA, so neither transformers nor peft is imported (models/lean_loading.py); any other model
(local folder, Hub id, smollm2, `trust_remote_code`) loads through transformers, and LoRA on it is PEFT's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BUILTIN_PREFIX = "builtin:"


def lean_applies(name: str | Path, *, trust_remote_code: bool = False) -> bool:
    """True for a built-in model (trained in full or with LoRA, the only modes)."""
    return str(name).startswith(BUILTIN_PREFIX) and not trust_remote_code


def uses_peft(name: str | Path, finetune: str, *, trust_remote_code: bool = False) -> bool:
    """Whether a run of this model and `[model] finetune` imports peft (and with it transformers)."""
    return finetune == "lora" and not lean_applies(name, trust_remote_code=trust_remote_code)


def config_uses_peft(config: Any) -> bool:
    """`uses_peft` for a run's config: `[model] model` and `finetune`, `[backend.options] trust_remote_code`."""
    m = config.model
    return uses_peft(m.model, m.finetune, trust_remote_code=bool(config.backend.options.get("trust_remote_code")))
