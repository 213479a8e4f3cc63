"""Edits between runs of a named campaign: what may change when its directory already holds runs.

A named campaign lives in a stable directory and re-running its command resumes it. Its runs must all
come from one config, so the config it runs with is compared with the one its `manifest.json` records
(secrets redacted on both sides), key by key, before Ray starts and before anything is written:

* `[campaign] max_steps` raised (N to M) EXTENDS the campaign: every run continues to M steps, a finished
  run after its `final` checkpoint (state, optimizer and random generators, as any resume), so the result
  is the run trained to M directly (tests/campaign/test_campaign_edits.py). The manifest records
  `extended: [{from, to, at, runs}]`. Tune will not run a finished (TERMINATED) trial again, so the
  driver sets Tune's experiment state aside (`tune/.extended-<time>/`, campaign/resume/tune_copies.py) and starts
  a fresh Tune experiment; each run then continues after its own newest verified checkpoint
  (campaign/resume/own_checkpoint.py), as after a torn Tune state.
* `max_steps` lowered is refused: finished runs have trained the steps already.
* The keys in `MAY_CHANGE` decide only how runs are scheduled or what runs after them; they may change.
* Every other change is refused naming each key with its recorded and new values, and the fix (a new
  campaign name, or revert). A key the recorded config lacks (added to the schema by a newer version)
  counts as unchanged while it holds its default.

An extension needs Tune's experiment directory on this machine: with a remote `[campaign] storage` it is
refused (what Tune stored there cannot be set aside from here).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from retrain_ray.campaign.plan import CampaignError
from retrain_ray.campaign.resume.own_checkpoint import flat_config
from retrain_ray.config import CampaignSection, RetrainConfig
from retrain_ray.logs.manifest import Manifest

EXTENDS = "campaign.max_steps"
MAY_CHANGE = ("campaign.name", "campaign.parallel", "campaign.max_workers", "campaign.stagger_seconds",
              "campaign.max_failures", "campaign.trial_start_timeout_s", "campaign.summary_script",
              "campaign.summary_args", "logging.log_dir", "squeeze")
_ABSENT = object()


@dataclass(frozen=True)
class Extension:
    """A finished campaign's runs continue from `from_steps` to `to_steps` steps."""

    from_steps: int
    to_steps: int


@cache
def _defaults() -> dict[str, object]:
    return flat_config(RetrainConfig(campaign=CampaignSection()).model_dump(mode="json"))


def _may_change(key: str) -> bool:
    return any(key == k or key.startswith(f"{k}.") for k in MAY_CHANGE)


def changed_keys(recorded: Mapping[str, object], current: Mapping[str, object]) -> list[tuple[str, object, object]]:
    """(dotted key, recorded value, current value) for each key whose value differs; a key only one side
    has counts when the other side's is not the schema default (a newer or older version's keys)."""
    old, new, defaults = flat_config(recorded), flat_config(current), _defaults()
    changes: list[tuple[str, object, object]] = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if before == after or after is _ABSENT:  # absent now: a key this version no longer has
            continue
        if before is _ABSENT and after == defaults.get(key, _ABSENT):  # a key added since, at its default
            continue
        changes.append((key, before, after))
    return changes


def _shown(value: object) -> str:
    text = "(not set)" if value is _ABSENT else repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _refusal(key: str, before: object, after: object) -> str:
    section, _, name = key.partition(".")
    line = f"[{section}].{name} changed: {_shown(before)} -> {_shown(after)}"
    if key == "training.max_steps":
        line += ("; in a campaign [campaign].max_steps sets every run's steps and replaces [training].max_steps: "
                 "raise [campaign].max_steps to extend the campaign")
    return line


def check_edits(recorded: Mapping[str, object], current: Mapping[str, object], *, campaign: str, campaign_dir: Path,
                local_tune: bool) -> Extension | None:
    """The extension the config asks of the campaign in `campaign_dir` (None: none), or CampaignError
    naming every change that is refused. `recorded`/`current`: redacted `model_dump(mode="json")`s."""
    changes = [c for c in changed_keys(recorded, current) if not _may_change(c[0])]
    problems = [_refusal(*c) for c in changes if c[0] != EXTENDS]
    steps = next(((_steps(b), _steps(a)) for k, b, a in changes if k == EXTENDS), None)
    if steps is not None and steps[1] < steps[0]:
        problems.append(f"[campaign].max_steps lowered: {steps[0]} -> {steps[1]}; a campaign cannot be shortened "
                        f"(its finished runs trained {steps[0]} steps): restore max_steps = {steps[0]}, or read the "
                        "first steps from its logs")
    elif steps is not None and not local_tune and not problems:
        problems.append(f"[campaign].max_steps raised: {steps[0]} -> {steps[1]}, but the campaign's Tune state is on "
                        "remote [campaign].storage, which an extension cannot set aside from here: run the longer "
                        "campaign under another name")
    if problems:
        raise CampaignError([
            f"{campaign_dir} already holds the runs of campaign {campaign!r}, made with another config:",
            *problems,
            "a campaign's runs all come from one config: only a raised [campaign].max_steps (which extends every "
            f"run) and {', '.join(MAY_CHANGE)} may change. Fix: run the new config as a new campaign (another "
            "[campaign].name, or --name), or revert the keys above to the values the campaign holds",
        ])
    return Extension(*steps) if steps is not None else None


def _steps(value: object) -> int:
    """`[campaign].max_steps` as recorded or configured (an int in a validated config)."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"[campaign].max_steps is not a number: {value!r}")


def record_extension(manifest: Manifest, extension: Extension, config: Mapping[str, object]) -> list[str]:
    """Marks the finished runs pending again with the new step count, records the extension and the
    config it runs with; returns the names of the runs that had finished."""
    record = manifest.record
    finished = [r.run_name for r in record.runs if r.status == "completed"]
    runs = tuple(r.model_copy(update={"max_steps": extension.to_steps,
                                      **({"status": "pending"} if r.status == "completed" else {})})
                 for r in record.runs)
    extended = {"from": extension.from_steps, "to": extension.to_steps, "runs": list(finished),
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    manifest.update(runs=runs, max_steps=extension.to_steps, config=dict(config),
                    extended=(*record.extended, extended))
    return finished
