"""`retrain-ray init [--template NAME] [--output PATH] [--list]`: write a starter TOML.

Templates (the original's names): `default` and `quickstart` (a CPU run of the built-in tiny model
that trains in about a minute), `experiment` (a GPU LoRA run of a hub model), `campaign` (conditions x
seeds). Every template loads with `load_config` (a test checks). An existing file is never
overwritten: pick another `--output` or remove it first.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

_TINY_RUN = """\
[model]
model = "builtin:tiny-h256-l2"     # offline, built in; any Hugging Face id works with network access
finetune = "full"

[backend]
backend = "local"
devices = "cpu"                    # "gpu:0", or "gpu:0,gpu:1" to sample on one GPU and train on the other

[data]
source = "builtin"
task = "first_digit"

[reward]
type = "match"

[algorithm]
advantage_mode = "maxrl"
transform_mode = "none"

[training]
seed = 1
max_steps = {max_steps}
sft_warmup_steps = 100
sft_target_correct_rate = 0.2
sft_lr = 3e-3
batch_size = 16
group_size = 8
max_tokens = 10
lr = 1.5e-3
batch_advantage_norm = true
save_every = 50

[optimizer]
grad_clip_norm = 1.0

[logging]
log_dir = "logs/{name}"
"""

_EXPERIMENT = """\
[model]
model = "HuggingFaceTB/SmolLM2-135M-Instruct"
finetune = "lora"
lora_rank = 32

[lora]
alpha = 64

[backend]
backend = "local"
devices = "gpu:0"

[inference]
engine = "pytorch"                 # "vllm" with the [gpu] extra

[data]
source = "math"

[reward]
type = "math"

[algorithm]
advantage_mode = "maxrl"
transform_mode = "gtpo_sepa"

[training]
max_steps = 200
batch_size = 8
group_size = 16
max_tokens = 1024
lr = 4e-5
save_every = 20

[backpressure]
enabled = false

[logging]
log_dir = "logs/experiment"
"""

_CAMPAIGN_TAIL = """
[campaign]
seeds = [1, 3]
max_steps = 160
parallel = true
max_workers = 2

[[campaign.conditions]]
advantage_mode = "grpo"
transform_mode = "none"

[[campaign.conditions]]
advantage_mode = "maxrl"
transform_mode = "none"

[[campaign.conditions]]
advantage_mode = "maxrl"
transform_mode = "gtpo"

# [squeeze]                          # after the campaign: LoRA rank analysis of the first finished run
# min_variance_retention = 0.95
"""

TEMPLATES: dict[str, tuple[str, str, str]] = {
    "default": ("retrain.toml", "CPU run of the built-in tiny model (about a minute)",
                _TINY_RUN.format(max_steps=240, name="train")),
    "quickstart": ("retrain.toml", "same as default, shorter (60 RL steps)",
                   _TINY_RUN.format(max_steps=60, name="quickstart")),
    "experiment": ("retrain.toml", "LoRA run of SmolLM2-135M on MATH on one GPU", _EXPERIMENT),
    "campaign": ("campaign.toml", "3 conditions x 2 seeds of the tiny model on Ray",
                 _TINY_RUN.format(max_steps=240, name="campaign") + _CAMPAIGN_TAIL),
}


def write_new(path: Path, text: str) -> None:
    """Creates `path` with `text`; FileExistsError if anything is there (O_EXCL: no race, no clobber)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def init_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="retrain-ray init", description="Write a starter TOML.")
    parser.add_argument("--template", default="default", choices=sorted(TEMPLATES))
    parser.add_argument("--output", "-o", default=None, help="file to write (default retrain.toml or campaign.toml)")
    parser.add_argument("--list", action="store_true", help="list the templates and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, (default_path, about, _) in TEMPLATES.items():
            print(f"{name:11} {default_path:14} {about}")
        return 0
    default_path, _, text = TEMPLATES[args.template]
    path = Path(args.output or default_path)
    try:
        write_new(path, text)
    except FileExistsError:
        print(f"error: {path} already exists; init never overwrites: pass --output OTHER.toml "
              "or remove the file first", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {path}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} (template {args.template}); next: retrain-ray explain {path}, then retrain-ray {path}")
    return 0
