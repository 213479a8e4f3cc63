"""`python -m retrain_ray ...`: the same as the `retrain-ray` console script."""

from retrain_ray.cli import entry

entry()
