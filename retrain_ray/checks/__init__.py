"""The one check pass: everything knowable about a config before any model loads or Ray starts.

- `rules`: the config's cross-key rules, refused keys and `[campaign.adaptive]` checks; every
  `RetrainConfig` runs them when built (through util/config_hooks.py, registered by `retrain_ray`), so a
  bad value is refused with its key, file and fix like a single-key error.
- `preflight`: one run's (or every condition's) plugins, model and the advantage probe against the
  backend's and engine's capabilities (`check_run`, `campaign_problems`, `condition_problems`).
- `probe`: the synthetic groups pushed through the configured advantage/transform flow.
- `machine`: what this machine lacks for a config (model cache, data files, servers, packages), which
  `explain` reports as warnings.

Layers: checks sits above `run` (it asks the components' registries) and below `campaign` and `cli`,
which call it before they train: `retrain-ray train` (cli/train.py), `explain`, the campaign driver
before Ray starts, and each campaign trial before its runner.
"""
