"""Small helpers used by several packages, none of which owns them. Each module imports nothing of
retrain_ray (and nothing heavy at import), so any layer may use it without an upward import:

- `config_hooks`: the hook through which the check pass (checks/) reaches every `RetrainConfig` built;
  config calls it, `retrain_ray/__init__.py` registers into it (config may not import checks).
- `dotted`: the syntax of a plugin reference (`package.module:attribute`); the schema (config/) accepts such a
  name where a key takes a component's name, the plugin loader (plugins/) imports it: one rule for both.
- `file_kinds`: what a path really is (a directory, a device, a pipe, a dangling link), for messages;
  used by the CLI front, config, data, models, logs and run.
- `finite`: the non-finite guards (rewards, gradients, saved tensors) and `NonFiniteError`; raised by
  run and backends/local, reported by the CLI.
- `judge_prompt`: the judge reward's prompt template and its check; config validates it, rewards fills
  it, and neither may import the other (config is the lowest layer; the reward must not load pydantic).
- `retry`: bounded retries with backoff for remote APIs; used by engines (OpenAI endpoints), rewards
  (the judge) and backends (tinker).
- `secrets`: redaction of secrets in everything written; used by config errors, run, logs, trackers,
  engines, rewards and campaign.
"""
