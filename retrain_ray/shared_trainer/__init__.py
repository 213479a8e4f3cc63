"""The shared multi-LoRA trainer: one base model copy, many LoRA runs' adapters and AdamW states resident,
one batched forward and backward over all their rows, each row under its own run's adapter (issue 36).

`SharedTrainer` (trainer.py) is the facade: `add_run`, `train_step({run_id: StepRequest})`,
`remove_run`, weight export and the solo backend's checkpoint files. The grouped LoRA modules are in
grouped_lora.py, one run's resident state in adapters.py, the batched step in step.py, and
`CoalescingTrainer` (coalescer.py) gathers members' concurrent calls into one batched step. A library, no Ray.
"""

from retrain_ray.shared_trainer.coalescer import CoalescingTrainer
from retrain_ray.shared_trainer.step import SharedStepResult
from retrain_ray.shared_trainer.trainer import SharedTrainer, SharedTrainerError
from retrain_ray.shared_trainer.types import SampleRequest, StepRequest

__all__ = ["CoalescingTrainer", "SampleRequest", "SharedStepResult", "SharedTrainer", "SharedTrainerError", "StepRequest"]
