"""[campaign] and [squeeze] (spec 5.1, 5.4): not TrainConfig sections, present only when the file
has them.

A condition holds `advantage_mode`, `transform_mode` and overrides keyed by the original's
TrainConfig *field* names (`lr`, `bp_enabled`, `transform_params`), or by a section name holding a
table (`training = {lr = 1e-5}`). Whether each override value is valid is checked by applying it to
the base config (checks/rules.py), so every condition is validated before any run starts.

Run and campaign names: each becomes a directory name (`<root>/<campaign>/runs/<run>/`, Tune's trial
directory), so each must be one plain directory name.

A run's name is `{label}_s{seed}` and its label is built from the condition's values
(`{advantage_mode}+{transform_mode}~key=value,...`), so an override value such as `"a/b"` or `".."` would
otherwise reach the file system (a directory outside the campaign) or stop Ray Tune after Ray started
and a half-written campaign directory was left. The rules, checked when the config is loaded and again
when a campaign is planned, before anything is written or Ray starts:

* not empty, not starting with `.` (no hidden or relative names);
* no `/` or `\\` (path separators), no `..` anywhere, no control characters (newline, tab, NUL);
* at most `MAX_NAME_BYTES` bytes in UTF-8 (file systems allow 255; Tune adds to trial directory names).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_serializer, model_validator

from retrain_ray.config.base import Bool, Float, Int, IntList, Section, StrList
from retrain_ray.config.errors import did_you_mean
from retrain_ray.config.key_names import FIELD_INDEX, TRAIN_SECTIONS
from retrain_ray.config.rung_schedule import DEFAULT_RUNG_EVERY, even_rungs
from retrain_ray.config.sections_training import SEED_MAX

DEFAULT_SEEDS = [42, 101, 202, 303, 404, 505, 606, 707]
DEFAULT_CONDITIONS: list[tuple[str, str]] = [
    ("grpo", "none"),
    ("maxrl", "none"),
    ("maxrl", "gtpo"),
    ("maxrl", "gtpo_hicra"),
    ("maxrl", "gtpo_sepa"),
]


class CampaignCondition(Section):
    advantage_mode: str = Field(min_length=1)
    transform_mode: str = Field(min_length=1)
    overrides: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect_overrides(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fixed = {"advantage_mode", "transform_mode"}
        overrides = dict(data.get("overrides", {}))
        overrides.update({k: v for k, v in data.items() if k not in fixed | {"overrides"}})
        return {**{k: data[k] for k in fixed if k in data}, "overrides": overrides}

    @field_validator("overrides")
    @classmethod
    def _known_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, value in v.items():
            if key in FIELD_INDEX:
                continue
            if key in TRAIN_SECTIONS and isinstance(value, dict):
                continue
            hint = did_you_mean(key, [*FIELD_INDEX, *TRAIN_SECTIONS])
            raise ValueError(
                f"unknown override {key!r}: conditions take TrainConfig field names (lr, bp_enabled, "
                f"transform_params, ...) or a section table (training = {{lr = 1e-5}}) {hint}".rstrip()
            )
        return v

    @model_serializer(mode="plain")
    def _flat(self) -> dict[str, Any]:
        return {"advantage_mode": self.advantage_mode, "transform_mode": self.transform_mode,
                **self.overrides}

    @property
    def label(self) -> str:
        """`{adv}+{tx}`, plus `~k=v,...` over the sorted overrides (spec 5.1)."""
        base = f"{self.advantage_mode}+{self.transform_mode}"
        if not self.overrides:
            return base
        return base + "~" + ",".join(f"{k}={v}" for k, v in sorted(self.overrides.items()))


ADAPTIVE_METRIC = "mean_reward"


class AdaptiveSection(Section):
    """`[campaign.adaptive]`: stop conditions that have clearly lost, add seeds where undecided
    (campaign/adaptive/scheduler.py, docs/campaigns.md). Absent: the full grid runs, as always."""

    metric: str = Field(default=ADAPTIVE_METRIC, min_length=1)
    """A logged column (mean_reward, correct_rate, loss, ...), averaged over the last `window` steps."""
    window: Int = Field(default=10, gt=0)
    mode: Literal["max", "min"] = "max"
    min_seeds: Int = Field(default=2, ge=2)
    max_seeds: Int = Field(default=4, ge=2)
    rungs: IntList = Field(default_factory=list)
    """The steps at which conditions are compared; left out: a rung at every `rung_every` of
    [campaign].max_steps (config/rung_schedule.py), filled in when the campaign section is validated."""
    rung_every: Float = Field(default=DEFAULT_RUNG_EVERY, gt=0.0, le=1.0)
    """The spacing of the default rungs, a fraction of max_steps (used only when `rungs` is left out)."""
    alpha: Float = Field(default=0.05, gt=0.0, lt=1.0)
    test: Literal["bonferroni", "sequential"] = "bonferroni"
    """How alpha is spent over the looks: alpha / looks at each (campaign/adaptive/policy.py), or the
    group-sequential permutation test with Lan-DeMets spending (campaign/adaptive/sequential.py)."""
    budget_steps: Int = Field(default=0, ge=0)
    """Total steps the campaign may spend (0: no limit); seeds are added only within it."""

    @field_validator("rungs")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if any(r <= 0 for r in v):
            raise ValueError(f"rungs must be positive steps, got {v}")
        if any(b <= a for a, b in zip(v, v[1:], strict=False)):
            raise ValueError(f"rungs must be strictly increasing steps, got {v}")
        return v

    @model_validator(mode="after")
    def _seed_range(self) -> AdaptiveSection:
        if self.max_seeds < self.min_seeds:
            raise ValueError(f"max_seeds = {self.max_seeds} is below min_seeds = {self.min_seeds}; "
                             "max_seeds is the most seeds a condition may get, min_seeds those it starts with")
        return self


def _default_conditions() -> list[CampaignCondition]:
    return [CampaignCondition(advantage_mode=a, transform_mode=t) for a, t in DEFAULT_CONDITIONS]


class CampaignSection(Section):
    seeds: IntList = Field(default_factory=lambda: list(DEFAULT_SEEDS), min_length=1)
    max_steps: Int = Field(default=500, gt=0)
    """Steps of every run. Defaults to 500 and REPLACES [training].max_steps (spec hazard 13.4)."""
    parallel: Bool = False
    max_workers: Int = Field(default=0, ge=0)
    stagger_seconds: Float = Field(default=0.0, ge=0.0)
    summary_script: str = ""
    summary_args: StrList = Field(default_factory=list)
    conditions: list[CampaignCondition] = Field(default_factory=_default_conditions, min_length=1)
    # ours
    name: str = ""
    max_failures: Int = Field(default=2, ge=0)
    cpus_per_run: Float = Field(default=1.0, gt=0.0)
    trial_start_timeout_s: Float = Field(default=600.0, gt=0.0)
    # GPU runs on a cluster without GPUs: false (default) waits for the autoscaler (or is an error on a
    # Ray this driver started); true runs them on CPU instead, with a warning.
    cpu_fallback: Bool = False
    # One-GPU runs packed N to a card (fractional GPU bundles of 1/N; vLLM's gpu_memory_utilization and
    # the trainer's memory split N ways): campaign/capacity/packing.py. 1 = a whole GPU per run.
    runs_per_gpu: Int = Field(default=1, ge=1)
    # The campaign's LoRA runs train on one base model copy per node (per GPU where runs hold GPUs): one
    # trainer actor holds every member's adapter and AdamW state and coalesces their steps
    # (actors/shared_trainer.py; refused with the reason for runs that cannot share: checks/shared_trainer.py).
    shared_trainer: Bool = False
    # Memory of one GPU of the cluster, for the packing check (the planning machine may have no GPU).
    gpu_memory_gib: Float = Field(default=80.0, gt=0.0)
    # Where Tune keeps run checkpoints and experiment state: "" (the campaign directory), or a pyarrow
    # filesystem URI ("s3://bucket/prefix", "gs://...", "file:///shared/x") every node can reach.
    storage: str = ""
    # Tune's copy of each run checkpoint: "pointer" (a small file naming the run's own checkpoint, so the
    # campaign stores each checkpoint once; with `storage` set Tune copies it whole anyway, as only its
    # storage is sure to reach every node) or "copy" (the whole checkpoint a second time, for a cluster
    # whose runs write to node-local disks under a campaign directory Tune's storage still reaches).
    tune_copies: Literal["pointer", "copy"] = "pointer"
    # None (no [campaign.adaptive] table): every condition x seed runs to the end
    adaptive: AdaptiveSection | None = None

    @field_validator("adaptive")
    @classmethod
    def _default_rungs(cls, v: AdaptiveSection | None, info: ValidationInfo) -> AdaptiveSection | None:
        """Rungs left out: a rung at every `rung_every` of max_steps (max_steps is validated first), and
        at least `window` steps apart (a run resumed after a pause at a rung starts its window anew)."""
        max_steps = info.data.get("max_steps")
        if v is None or v.rungs or not isinstance(max_steps, int):
            return v
        every = min(1.0, max(v.rung_every, v.window / max_steps))
        return v.model_copy(update={"rungs": even_rungs(max_steps, every)})

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        bad = [s for s in v if not -1 <= s <= SEED_MAX]
        if bad:
            raise ValueError(f"seeds must be in [-1, {SEED_MAX}], got {bad}")
        dupes = sorted({s for s in v if v.count(s) > 1})
        if dupes:
            raise ValueError(f"duplicate seeds {dupes} would give runs the same name")
        return v

    @field_validator("conditions")
    @classmethod
    def _unique_labels(cls, v: list[CampaignCondition]) -> list[CampaignCondition]:
        labels = [c.label for c in v]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"duplicate condition labels {dupes} would give runs the same name")
        return v

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        problem = name_problem(v) if v else ""  # "" = a dated name (campaign/plan.py)
        if problem:
            raise ValueError(f"the campaign name becomes its directory name, so it must be {RULES}: {problem}")
        return v

    @field_validator("conditions")
    @classmethod
    def _plain_run_names(cls, v: list[CampaignCondition], info: ValidationInfo) -> list[CampaignCondition]:
        """Every run name (a directory name) is plain: a `/` or `..` in an override would escape."""
        seeds = list(info.data.get("seeds") or [0])
        problems = [p for i, c in enumerate(v)
                    for p in condition_name_problems(i, c.label, c.advantage_mode, c.transform_mode, c.overrides, seeds)]
        if problems:
            raise ValueError("; ".join(problems))
        return v


class SqueezeSection(Section):
    """LoRA-Squeeze settings (spec 5.4): accepted and parsed; 0 / "" mean "infer" or "off"."""

    adapter_path: str = ""
    source_rank: Int = Field(default=0, ge=0)
    target_ranks: IntList = Field(default_factory=list)
    min_variance_retention: Float = Field(default=0.95, gt=0.0, le=1.0)
    output_path: str = ""
    compress_to: Int = Field(default=0, ge=0)
    device: str = "cpu"


MAX_NAME_BYTES = 200
RULES = (f"a plain directory name: not empty, no '/' or '\\', no '..', no control characters, not starting "
         f"with '.', at most {MAX_NAME_BYTES} bytes")


def run_name(label: str, seed: int) -> str:
    return f"{label}_s{seed}"


def _bad_characters(text: str) -> str:
    """What in `text` may not be part of a name ("" when nothing)."""
    found = [repr(c) for c in ("/", "\\") if c in text]
    if ".." in text:
        found.append("'..'")
    controls = sorted({c for c in text if ord(c) < 32 or ord(c) == 127})
    found += [repr(c) for c in controls]
    return ", ".join(found)


def name_problem(name: str) -> str:
    """Why `name` cannot be a directory name ("" when it can)."""
    if not name.strip():
        return "it is empty"
    bad = _bad_characters(name)
    if bad:
        return f"it contains {bad}"
    if name.startswith("."):
        return "it starts with '.'"
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        return f"it is {size} bytes long (at most {MAX_NAME_BYTES})"
    return ""


def _pieces(advantage_mode: str, transform_mode: str, overrides: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, text it puts in the label) for each part of a condition's label."""
    parts = [("advantage_mode", advantage_mode), ("transform_mode", transform_mode)]
    return parts + [(key, f"{key}={value}") for key, value in sorted(overrides.items())]


def condition_name_problems(index: int, label: str, advantage_mode: str, transform_mode: str,
                            overrides: dict[str, Any], seeds: list[int]) -> list[str]:
    """Problems of the run names condition `index` gives with `seeds`, each naming the key at fault."""
    where = f"campaign.conditions[{index}] ({label!r})"
    problems = []
    for key, text in _pieces(advantage_mode, transform_mode, overrides):
        bad = _bad_characters(text)
        if bad:
            problems.append(f"{where}: `{key}` puts {bad} into its run names ({run_name(label, seeds[0] if seeds else 0)!r}); "
                            f"a run name becomes a directory name, so it must be {RULES}. Fix: give `{key}` a value "
                            "without them (the run name is `{advantage_mode}+{transform_mode}~key=value,..._s{seed}`)")
    if problems:
        return problems
    longest = max((run_name(label, s) for s in seeds), key=len, default=label)
    problem = name_problem(longest)
    if problem:
        keys = ", ".join(f"`{k}`" for k in sorted(overrides)) or "`advantage_mode`, `transform_mode`"
        shown = longest if len(longest) <= 60 else f"{longest[:60]}..."
        problems.append(f"{where}: its run name {shown!r} cannot be a directory name: {problem}. Fix: "
                        f"shorten the values of {keys} (the run name is `{{advantage_mode}}+{{transform_mode}}"
                        "~key=value,..._s{seed}`), or set long values in the base config instead of the condition")
    return problems
