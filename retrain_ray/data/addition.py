"""The `addition` task: "What is 3 + 5?" in words a chat model reads, rewarded on the final number.

Made for real instruct models (SmolLM2-135M-Instruct), which answer in a sentence ("3 + 5 = 8.") and
never inside `\\boxed{}`: pair it with `[reward] type = "final_number"`, which scores the last number of
the completion, so a model is rewarded for the right sum and not for a format it does not know.
The built-in `add` task is for the character-level tiny model (prompts "3+5=", boxed answers).

Levels: 1 = one-digit operands (0-9: 100 distinct prompts, so keep `num_eval_examples` near 32 to leave
prompts to train on), 2 = two-digit (10-99), 3 = three-digit (100-999).
"""

from __future__ import annotations

import random

from retrain_ray.data.types import Example

ADDITION_RANGES = {1: (0, 9), 2: (10, 99), 3: (100, 999)}


def addition(rng: random.Random, level: int) -> Example:
    low, high = ADDITION_RANGES[level]
    a, b = rng.randint(low, high), rng.randint(low, high)
    return Example(f"What is {a} + {b}?", str(a + b))


def sentence_answer(reference: str) -> str:
    """How a correct completion is written for a supervised warm start: a sentence ending in the number."""
    return f"The answer is {reference}."
