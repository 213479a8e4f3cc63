"""Experiment trackers: W&B, MLflow and TensorBoard as RunObservers, each an optional extra.

Each tracker receives exactly the rows the Arrow logs receive (`on_step`, `on_eval`), so a tracked
run and the campaign's `metrics.arrows` never disagree. One tracked run per campaign run: grouped by
campaign (W&B group, MLflow experiment, TensorBoard directory) and tagged with condition and seed.
A retried or resumed run continues the same tracked run (W&B id and MLflow run found by a key
derived from campaign and run name).

    trackers = build_trackers(cfg, RunIdentity("grpo+none_s1", "grpo+none", 1, campaign="c1"), run_dir)
"""

from retrain_ray.trackers.build import RunIdentity, build_trackers, missing_trackers

__all__ = ["RunIdentity", "build_trackers", "missing_trackers"]
