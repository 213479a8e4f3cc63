"""`RetrainConfig`: the whole configuration, one attribute per TOML section.

The model is frozen and round-trips (`RetrainConfig.model_validate(cfg.model_dump()) == cfg`, and
through `dump_toml` / `load_config`). Constructing it runs every cross-key rule of the check pass and
raises `ConfigError` with all problems at once (the rules are `retrain_ray.checks`, reached through
the hook of util/config_hooks.py), so the Python API is as strict as a TOML file.
`campaign` and `squeeze` are None unless the file has those sections: a file with `[campaign]` is a
campaign, anything else is a single run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from retrain_ray.config.campaign_schema import CampaignSection, SqueezeSection
from retrain_ray.config.errors import ConfigError
from retrain_ray.config.sections_runtime import (
    BackpressureSection,
    DataSection,
    EchoSection,
    EnvironmentSection,
    InferenceSection,
    LoggingSection,
    OptimizerBatchSection,
    PlanningSection,
    PluginsSection,
    ResumeSection,
    RewardSection,
)
from retrain_ray.config.sections_training import (
    AlgorithmSection,
    BackendSection,
    GtpoSection,
    HicraSection,
    LoraSection,
    ModelSection,
    OptimizerSection,
    SepaSection,
    TrainingSection,
)
from retrain_ray.util.config_hooks import config_checks


class RetrainConfig(BaseModel):
    """The validated configuration of one run or one campaign."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    training: TrainingSection = Field(default_factory=TrainingSection)
    algorithm: AlgorithmSection = Field(default_factory=AlgorithmSection)
    backend: BackendSection = Field(default_factory=BackendSection)
    model: ModelSection = Field(default_factory=ModelSection)
    optimizer: OptimizerSection = Field(default_factory=OptimizerSection)
    lora: LoraSection = Field(default_factory=LoraSection)
    gtpo: GtpoSection = Field(default_factory=GtpoSection)
    hicra: HicraSection = Field(default_factory=HicraSection)
    sepa: SepaSection = Field(default_factory=SepaSection)
    inference: InferenceSection = Field(default_factory=InferenceSection)
    backpressure: BackpressureSection = Field(default_factory=BackpressureSection)
    planning: PlanningSection = Field(default_factory=PlanningSection)
    data: DataSection = Field(default_factory=DataSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    reward: RewardSection = Field(default_factory=RewardSection)
    resume: ResumeSection = Field(default_factory=ResumeSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    echo: EchoSection = Field(default_factory=EchoSection)
    optimizer_batch: OptimizerBatchSection = Field(default_factory=OptimizerBatchSection)
    plugins: PluginsSection = Field(default_factory=PluginsSection)
    campaign: CampaignSection | None = None
    squeeze: SqueezeSection | None = None

    @model_validator(mode="after")
    def _cross_key_rules(self) -> RetrainConfig:
        issues = [issue for check in config_checks() for issue in check.issues(self)]
        if issues:
            raise ConfigError(issues)
        return self

    @property
    def is_campaign(self) -> bool:
        return self.campaign is not None

    def to_raw(self) -> dict[str, Any]:
        """The config as nested TOML-keyed dicts (absent optional sections left out)."""
        return {k: v for k, v in self.model_dump(by_alias=True).items() if v is not None}

    def replace_section(self, name: str, **changes: object) -> RetrainConfig:
        """A copy with keys of one section changed, validated again (sections are frozen)."""
        section = getattr(self, name)
        data = section.model_dump(by_alias=True) if section is not None else {}
        data.update(changes)
        return RetrainConfig.model_validate({**self.model_dump(by_alias=True), name: data})


SECTION_NAMES: tuple[str, ...] = tuple(RetrainConfig.model_fields)
