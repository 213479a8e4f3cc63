"""Back pressure: per-run USL controller (the original's), pooled fit per shared resource, advisors.

The Ray actor and its client (`BackPressureActor`, `RemoteAdvisor`) live in retrain_ray/actors/backpressure.py.
"""

from retrain_ray.backpressure.advisor import LocalAdvisor, apply_trainer_rules, warmup_batch_sizes
from retrain_ray.backpressure.fit import usl_capacity, usl_optimal_p
from retrain_ray.backpressure.pooled import PooledController, PooledDecision
from retrain_ray.backpressure.settings import BackPressureSettings
from retrain_ray.backpressure.types import (
    BackPressureAdvisor,
    Decision,
    NoOpAdvisor,
    StepObservation,
    default_decision,
)
from retrain_ray.backpressure.usl import USLController

__all__ = [
    "BackPressureAdvisor", "BackPressureSettings", "Decision", "LocalAdvisor", "NoOpAdvisor",
    "PooledController", "PooledDecision", "StepObservation", "USLController", "apply_trainer_rules",
    "default_decision", "usl_capacity", "usl_optimal_p", "warmup_batch_sizes",
]
