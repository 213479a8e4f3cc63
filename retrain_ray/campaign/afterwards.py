"""What runs after a campaign's last run (spec 5.2): the auto-squeeze, then the summary script.

* `[squeeze]`: LoRA-Squeeze of the first completed run (manifest order), from the last checkpoint
  it reported to Tune (the manifest's `checkpoint`); the report and the compressed
  adapter go to `<campaign>/squeeze/`, and the manifest records `squeeze: {run, recommended_rank, ...}`.
  With `[campaign] storage` on a remote filesystem (`s3://`, `gs://`) that checkpoint's `adapter/`
  is first downloaded to `<campaign>/squeeze/source/`.
* `[campaign] summary_script`: `python SCRIPT <campaign_dir> *summary_args`, in the current directory
  (as the original), output in `<campaign>/summary.log`; the manifest records
  `summary: {script, args, returncode}`.

First the manifest records `compute`: the GPU- and CPU-hours the runs spent and, for an adaptive campaign,
saved against the full grid (results/compute.py).

Neither can lose results: a failure is recorded in the manifest and told to the campaign's observer, and the campaign's own
exit status stays that of its runs.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from retrain_ray.campaign.observer import CampaignObserver
from retrain_ray.config import CampaignSection, SqueezeSection
from retrain_ray.logs.manifest import Manifest

SUMMARY_LOG = "summary.log"
SUMMARY_TIMEOUT_S = 3600.0


class FinishedCampaign(Protocol):
    """What the post-campaign steps read of the campaign's config: `[campaign]` and `[squeeze]`."""

    @property
    def campaign(self) -> CampaignSection | None: ...
    @property
    def squeeze(self) -> SqueezeSection | None: ...


def run_afterwards(campaign_dir: Path, config: FinishedCampaign, *, observer: CampaignObserver | None = None) -> None:
    """Records the compute the campaign used, runs the configured post-campaign steps and records each in
    the manifest."""
    campaign = config.campaign
    observer = observer or CampaignObserver()
    record_compute(campaign_dir, observer)
    if config.squeeze is not None:
        storage = str(campaign.storage or "") if campaign is not None else ""
        _record(campaign_dir, "squeeze", squeeze_first_completed(campaign_dir, config.squeeze, storage), observer)
    if campaign is not None and campaign.summary_script:
        _record(campaign_dir, "summary",
                run_summary_script(campaign_dir, campaign.summary_script, list(campaign.summary_args)), observer)


def record_compute(campaign_dir: Path, observer: CampaignObserver) -> None:
    """The manifest's `compute`: GPU- and CPU-hours spent, and saved by an adaptive campaign (results/compute.py)."""
    # deferred: loads pandas and pyarrow, which importing this module does not need
    from retrain_ray.results.campaign_results import CampaignResults
    from retrain_ray.results.compute import describe

    try:
        used = CampaignResults.from_dir(campaign_dir).compute()
    except (OSError, ValueError) as exc:
        observer.on_afterwards_failed("compute", str(exc))
        return
    Manifest.load(campaign_dir).update(compute=used.to_json())
    for line in describe(used):
        observer.on_notice(line)


def squeeze_first_completed(campaign_dir: Path, section: SqueezeSection, storage: str = "") -> dict[str, object]:
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.squeeze import SqueezeError, SqueezeSettings, squeeze_adapter

    runs = Manifest.load(campaign_dir).record.runs
    first = next((r for r in runs if r.status == "completed"), None)
    if first is None:
        return {"error": "no completed run to squeeze"}
    settings = SqueezeSettings.from_section(section)
    settings = dataclasses.replace(settings, output_path=settings.output_path or str(campaign_dir / "squeeze"))
    try:
        source = _local_checkpoint(campaign_dir, storage, first.checkpoint)
        report = squeeze_adapter(source or Path(first.run_dir), settings)
    except (SqueezeError, OSError) as exc:
        return {"run": first.run_name, "error": str(exc)}
    return {"run": first.run_name, "recommended_rank": report.recommended_rank,
            "compressed_rank": report.compressed_rank, "adapter": report.output_path,
            "report": str(Path(settings.output_path) / "squeeze.json")}


def _local_checkpoint(campaign_dir: Path, storage: str, checkpoint: str) -> Path | None:
    """`checkpoint` (a path on Tune's storage, as Tune names it) as a local directory, or None.

    On the local filesystem it is used in place; on a remote one (`storage` is Tune's storage URI)
    its `adapter/` is downloaded to `<campaign>/squeeze/source/`."""
    if not checkpoint:
        return None
    if not storage:
        return Path(checkpoint)
    # deferred: only remote storage needs it; pyarrow ships no type stubs, so its calls are unchecked here
    import pyarrow.fs as pafs  # pyright: ignore[reportMissingTypeStubs]

    fs, _ = pafs.FileSystem.from_uri(storage)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if isinstance(fs, pafs.LocalFileSystem):  # pyright: ignore[reportUnknownMemberType]
        return Path(checkpoint)
    remote = f"{checkpoint.rstrip('/')}/adapter"
    if fs.get_file_info(remote).type != pafs.FileType.Directory:  # pyright: ignore[reportUnknownMemberType]
        from retrain_ray.squeeze import SqueezeError  # deferred: loads torch

        raise SqueezeError(f"no LoRA adapter in {storage.split('://')[0]}://{checkpoint} (no adapter/); squeeze needs "
                           "a run trained with finetune = \"lora\"")
    local = campaign_dir / "squeeze" / "source" / "adapter"
    local.mkdir(parents=True, exist_ok=True)
    pafs.copy_files(remote, str(local), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return local


def run_summary_script(campaign_dir: Path, script: str, args: list[str]) -> dict[str, object]:
    record: dict[str, object] = {"script": script, "args": args, "log": str(campaign_dir / SUMMARY_LOG)}
    if not Path(script).is_file():
        return {**record, "returncode": None, "error": f"summary_script {script} not found (relative to {Path.cwd()})"}
    with open(campaign_dir / SUMMARY_LOG, "w") as log:
        try:
            done = subprocess.run([sys.executable, script, str(campaign_dir), *args], stdout=log,
                                  stderr=subprocess.STDOUT, timeout=SUMMARY_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return {**record, "returncode": None, "error": f"still running after {SUMMARY_TIMEOUT_S:.0f} s; stopped"}
    return {**record, "returncode": done.returncode}


def _record(campaign_dir: Path, key: str, result: dict[str, object], observer: CampaignObserver) -> None:
    Manifest.load(campaign_dir).update(**{key: result})
    failed = "error" in result or result.get("returncode") not in (None, 0)
    if failed:
        why = result.get("error") or f"exit code {result['returncode']} (see {result.get('log')})"
        observer.on_afterwards_failed(key, str(why))
    else:
        observer.on_afterwards(key, result)
