"""`python -m retrain_ray.cli ...`: the same as the `retrain-ray` console script."""

from retrain_ray.cli import entry

entry()
