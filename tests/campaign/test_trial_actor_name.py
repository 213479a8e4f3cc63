"""Ray names a trial's actor after the trainable's class: `RetrainRun`, not Tune's `ImplicitFunc`."""

from __future__ import annotations

from typing import Any, cast

from ray import tune

from retrain_ray.campaign.experiment import make_trainable
from retrain_ray.campaign.trial import TrialContext


def test_the_trial_actor_class_is_named_retrain_run(ray_4cpu_4gpu: Any) -> None:
    trainable = make_trainable(cast(TrialContext, None), {"r": tune.PlacementGroupFactory([{"CPU": 1}])})
    assert issubclass(trainable, tune.Trainable) and trainable.__name__ == "RetrainRun"
    # what Tune does with a class trainable, and what the GCS (list_actors' class_name) records
    actor_class = ray_4cpu_4gpu.remote(trainable)
    assert actor_class.__ray_metadata__.actor_creation_function_descriptor.class_name == "RetrainRun"
