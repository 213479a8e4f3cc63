"""Built-in verifiable tasks, generated procedurally from a seed (no downloads).

Each task draws examples from `random.Random("<name>:<level>:<seed>")`, so a (name, level, seed)
always yields the same splits on every machine. References are plain answers ("4", "579"); the
expected completion is `\\boxed{<reference>}` (`TaskSpec.format_answer`), which the `match` reward
scores 1.0. Prompts of the digit and arithmetic tasks stay under 24 characters so a character-level
model keeps its sequences short; `word_problem` prompts are sentences.

Splits: eval examples are drawn first and their prompts are never used for training. When a
level's prompt space is smaller than num_train + num_eval, train cycles over the prompts that
remain (so it repeats) rather than leaking eval prompts (`load_task`).
"""

from __future__ import annotations

import itertools
import random

from retrain_ray.data.addition import addition, sentence_answer
from retrain_ray.data.types import Example, TaskData, TaskSpec

DIGIT_COUNTS = {1: 3, 2: 5, 3: 8}
COPY_COUNTS = {1: 3, 2: 4, 3: 6}


def _digits(rng: random.Random, count: int) -> str:
    first = str(rng.randint(1, 9))
    return first + "".join(str(rng.randint(0, 9)) for _ in range(count - 1))


def first_digit(rng: random.Random, level: int) -> Example:
    """Level 1 is the bare digit string: the tiny character model learns it by RL in seconds (with an
    instruction in front, the copy distance grows and the warm start needs several times more steps)."""
    digits = _digits(rng, DIGIT_COUNTS[level])
    if level == 1:
        return Example(digits, digits[0])
    return Example(f"Digits: {digits}\nFirst digit:", digits[0])


def last_digit(rng: random.Random, level: int) -> Example:
    digits = _digits(rng, DIGIT_COUNTS[level])
    return Example(f"Digits: {digits}\nLast digit:", digits[-1])


def copy_digit(rng: random.Random, level: int) -> Example:
    digits = _digits(rng, COPY_COUNTS[level])
    return Example(f"Copy: {digits}\nAnswer:", digits)


ADD_RANGES = {1: (0, 19), 2: (10, 99), 3: (100, 999)}


def add(rng: random.Random, level: int) -> Example:
    low, high = ADD_RANGES[level]
    a, b = rng.randint(low, high), rng.randint(low, high)
    return Example(f"{a}+{b}=", str(a + b))


MULTIPLY_RANGES = {1: ((2, 9), (2, 99)), 2: ((10, 99), (10, 99)), 3: ((100, 999), (10, 99))}


def multiply(rng: random.Random, level: int) -> Example:
    (a_low, a_high), (b_low, b_high) = MULTIPLY_RANGES[level]
    a, b = rng.randint(a_low, a_high), rng.randint(b_low, b_high)
    return Example(f"{a}*{b}=", str(a * b))


NAMES = ("Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jo")
ITEMS = ("apples", "pens", "stamps", "marbles", "books", "shells", "cards", "coins")


def word_problem(rng: random.Random, level: int) -> Example:
    """Level 1: a + b (1-9). Level 2: a + b or a - b (up to 50). Level 3: a + b - c (up to 99)."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    if level == 1:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        return Example(f"{name} has {a} {item} and buys {b} more. How many {item}?", str(a + b))
    if level == 2:
        a, b = rng.randint(10, 50), rng.randint(1, 9)
        if rng.random() < 0.5:
            return Example(f"{name} has {a} {item} and gets {b} more. How many {item}?", str(a + b))
        return Example(f"{name} has {a} {item} and gives away {b}. How many {item} are left?", str(a - b))
    a, b = rng.randint(20, 99), rng.randint(2, 30)
    c = rng.randint(1, a + b - 1)
    return Example(
        f"{name} has {a} {item}, buys {b} more, then gives {c} away. How many {item} now?", str(a + b - c)
    )


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("first_digit", first_digit, description="first digit of a digit string"),
        TaskSpec("last_digit", last_digit, description="last digit of a digit string"),
        TaskSpec("copy_digit", copy_digit, description="copy a digit string"),
        TaskSpec("add", add, description="sum of two numbers (levels: 0-19, 2-digit, 3-digit)"),
        TaskSpec("multiply", multiply, description="product of two numbers"),
        TaskSpec("word_problem", word_problem, description="templated arithmetic word problems"),
        TaskSpec("addition", addition, format_answer=sentence_answer,
                 description="'What is a + b?' for chat models (levels: 1-, 2-, 3-digit); reward final_number"),
    )
}


DRAWS_PER_EXAMPLE = 20
"""Give up looking for new distinct prompts after this many draws per requested example."""


def get_task(name: str) -> TaskSpec:
    """Look up a built-in task by name, with the list of known names when it is unknown."""
    spec = TASKS.get(name)
    if spec is None:
        raise ValueError(f"unknown built-in task {name!r} ([data] task); choose one of {sorted(TASKS)}")
    return spec


def _distinct_examples(spec: TaskSpec, level: int, seed: int, wanted: int) -> list[Example]:
    rng = random.Random(f"{spec.name}:{level}:{seed}")
    seen: dict[str, Example] = {}
    for _ in range(wanted * DRAWS_PER_EXAMPLE):
        example = spec.generate(rng, level)
        seen.setdefault(example.prompt, example)
        if len(seen) >= wanted:
            break
    return list(seen.values())


def load_task(name: str, level: int = 1, seed: int = 0, num_train: int = 512, num_eval: int = 64) -> TaskData:
    """Generate a built-in task's train and eval splits; eval prompts never appear in train."""
    spec = get_task(name)
    if level not in spec.levels:
        raise ValueError(f"task {name!r} has levels {list(spec.levels)}; got [data] level = {level}")
    if num_train <= 0 or num_eval < 0:
        raise ValueError(f"task {name!r}: num_train must be > 0 and num_eval >= 0, got {num_train}, {num_eval}")
    pool = _distinct_examples(spec, level, seed, num_train + num_eval)
    if len(pool) <= num_eval:
        raise ValueError(
            f"task {name!r} level {level} has only {len(pool)} distinct prompts, too few for "
            f"{num_eval} eval examples plus training; lower num_eval or raise the level"
        )
    eval_examples, rest = pool[:num_eval], pool[num_eval:]
    train = list(itertools.islice(itertools.cycle(rest), num_train))
    return TaskData(train=train, eval=eval_examples, format_answer=spec.format_answer)
