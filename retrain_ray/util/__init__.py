"""Small helpers used by several packages, none of which owns them. Each module imports nothing of
retrain_ray (and nothing heavy at import), so any layer may use it without an upward import:

- `config_hooks`: the hook through which the check pass (checks/) reaches every `RetrainConfig` built;
  config calls it, `retrain_ray/__init__.py` registers into it (config may not import checks).
- `dotted`: `is_dotted_path`, the one syntax rule of a plugin reference; the plugin loader imports such
  names, config accepts them where a key names a component (config may import only util).
- `file_kinds`: what a path really is (a directory, a device, a pipe, a dangling link), for messages;
  used by the CLI front, config, data, models, logs and run.
- `finite`: the non-finite guards (rewards, gradients, saved tensors) and `NonFiniteError`; raised by
  run and backends/local, reported by the CLI.
- `judge_prompt`: the judge reward's prompt template and its check; config validates it, rewards fills
  it, and neither may import the other (config is the lowest layer; the reward must not load pydantic).
- `process_clock`: when this process started (time to first step, lock ownership); used by the CLI,
  logs (directory locks) and campaign (trials, manifest).
- `retry`: bounded retries with backoff for remote APIs; used by engines (OpenAI endpoints), rewards
  (the judge) and backends (tinker).
- `secrets`: redaction of secrets in everything written; used by config errors, run, logs, trackers,
  engines, rewards and campaign.
"""
