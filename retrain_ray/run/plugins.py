"""Component plugins as the original loads them: a dotted `[data] source`, `[reward] type` or
`[planning] detector` names a factory that is called with the configuration, `factory(config)`.

The factory receives `OriginalConfigView`, which answers the original's flat `TrainConfig` field names
(`config.max_examples`, `config.seed`, `config.reward_custom_module`, ...) from our sectioned config,
so a plugin written for the original runs unchanged. What the factory returns must follow the
original's protocols: a data source has `load()` returning objects with `prompt` and `reference`; a
reward has `score(response, reference) -> float`; a detector has `detect(token_strs) -> list[int]`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeGuard

from retrain_ray.config.key_names import OriginalConfigView
from retrain_ray.data.types import Example
from retrain_ray.plugins.loader import load_callable, use_search_paths

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.data.types import Example


class DataSource(Protocol):
    """The original's data source: `load()` gives rows with `prompt` and `reference`."""

    def load(self) -> Iterable[object]: ...


class Scorer(Protocol):
    """The original's reward object."""

    def score(self, response: str, reference: str) -> float: ...


def is_data_source(obj: object) -> TypeGuard[DataSource]:
    return callable(getattr(obj, "load", None))


def is_scorer(obj: object) -> TypeGuard[Scorer]:
    return callable(getattr(obj, "score", None))


def create_plugin(path: str, cfg: RetrainConfig, kind: str) -> object:
    """`factory(config)` of the dotted `path`, looked up under `[plugins] search_paths`."""
    use_search_paths(cfg.plugins.search_paths)
    return load_callable(path, kind)(OriginalConfigView(cfg))


def load_plugin_examples(cfg: RetrainConfig) -> list[Example]:
    """`factory(config).load()` of a dotted `[data] source`, as our Examples."""
    source = create_plugin(cfg.data.source, cfg, "[data] source")
    if not is_data_source(source):
        raise ValueError(f"[data] source {cfg.data.source!r}: the factory must return an object with "
                         "load() -> examples with `prompt` and `reference`")
    rows = source.load()
    examples: list[Example] = []
    for i, row in enumerate(rows):
        prompt, reference = getattr(row, "prompt", None), getattr(row, "reference", None)
        if not isinstance(prompt, str) or reference is None:
            raise ValueError(f"[data] source {cfg.data.source!r}: example {i} needs a string `prompt` and a "
                             f"`reference` (got {type(row).__name__})")
        examples.append(Example(prompt, str(reference)))
    return examples


class PluginReward:
    """A reward object of the original's protocol (`score(response, reference)`), scored per pair."""

    def __init__(self, scorer: object, label: str) -> None:
        if not is_scorer(scorer):
            raise ValueError(f"[reward] type {label!r}: the factory must return an object with "
                             "score(response, reference) -> float")
        self.scorer, self.name = scorer, label

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        return [float(self.scorer.score(c, r)) for c, r in zip(completions, references, strict=True)]


def create_reward(cfg: RetrainConfig) -> PluginReward:
    return PluginReward(create_plugin(cfg.reward.type, cfg, "[reward] type"), cfg.reward.type)


def create_detector(cfg: RetrainConfig) -> Callable[[Sequence[str]], list[int]]:
    detector = create_plugin(cfg.planning.detector, cfg, "[planning] detector")
    detect: Callable[[list[str]], list[int]] | None = getattr(detector, "detect", None)
    if not callable(detect):
        raise ValueError(f"[planning] detector {cfg.planning.detector!r}: the factory must return an object "
                         "with detect(token_strs) -> list[int]")
    return lambda tokens: list(detect(list(tokens)))
