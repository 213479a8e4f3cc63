"""Where a run's processes go: resource bundles per placement mode, checked against the cluster (pure: no Ray;
the alive nodes come from campaign/local_ray.py).

A run asks for devices with `[backend].devices` (spec 7): "cpu", "gpu:0" (one GPU) or
"gpu:0,gpu:1" (two GPUs: split mode). Each placement mode is one entry of `PLACEMENTS`:

* cpu:    one bundle `[{CPU}]`; sampling and training in the trial process.
* gpu:    one bundle `[{CPU, GPU: 1}]`; sampling and training in the trial process on its GPU.
          Packed N to a card (`[campaign] runs_per_gpu`, campaign/capacity/packing.py): `[{CPU, GPU: 1/N}]`;
          Ray gives the N runs of a card the same GPU id (CUDA_VISIBLE_DEVICES).
* split:  `[{CPU}, {GPU: 1}, {GPU: 1}]` with STRICT_PACK: the trial process (bundle 0) drives an
          InferenceActor pinned to bundle 1 and a TrainerActor pinned to bundle 2.

A run that keeps every GPU in its own process (`in_process`: a plugin backend or engine, see
`backends/registry.run_devices`) is never split: n GPUs are one bundle `[{CPU, GPU: n}]` ("gpu").

Departure from the original: the original runs every run on the devices named in the config, on one
machine. Here the names only say *how many* GPUs a run needs; Ray picks which ones (the trial sees
its own GPU as device 0 through CUDA_VISIBLE_DEVICES). A GPU run is never silently turned into a CPU
run: `decide_placement` keeps its GPU bundles, and when no alive node can hold them, either the runs wait
for the autoscaler (a cluster this driver connected to: Tune's pending placement groups are the
autoscaler's demand; the wait is bounded by `[campaign] trial_start_timeout_s`), or, on a Ray this
driver started itself (nothing can scale it), it is an error before any trial starts. The original's
fallback to CPU on a machine without GPUs happens only with `[campaign] cpu_fallback = true`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

PlacementMode = Literal["cpu", "gpu", "split"]
Bundle = dict[str, float]


@dataclass(frozen=True)
class Placement:
    """Resources of one run: Tune's placement group bundles and the mode. Frozen, picklable."""

    mode: PlacementMode
    bundles: tuple[tuple[tuple[str, float], ...], ...]
    strategy: str

    @property
    def bundle_dicts(self) -> list[Bundle]:
        return [dict(b) for b in self.bundles]

    @property
    def num_gpus(self) -> float:
        """GPUs of all bundles: 0.25 for a run packed four to a card."""
        return sum(b.get("GPU", 0.0) for b in self.bundle_dicts)


def parse_devices(devices: str) -> int:
    """Number of GPUs a `[backend].devices` string asks for ("cpu" -> 0, "gpu:0,gpu:1" -> 2)."""
    parts = [p.strip().lower() for p in devices.split(",") if p.strip()]
    if parts == ["cpu"]:
        return 0
    bad = [p for p in parts if not (p.startswith("gpu") or p.startswith("cuda"))]
    if not parts or bad:
        raise ValueError(
            f"backend.devices = {devices!r}: expected 'cpu', 'gpu:0' or a list like 'gpu:0,gpu:1'"
        )
    return len(parts)


def _cpu(cpus: float) -> Placement:
    return Placement("cpu", ((("CPU", cpus),),), "PACK")


def _gpu(cpus: float, gpus: float = 1.0) -> Placement:
    return Placement("gpu", ((("CPU", cpus), ("GPU", float(gpus))),), "PACK")


def _split(cpus: float) -> Placement:
    return Placement("split", ((("CPU", cpus),), (("GPU", 1.0),), (("GPU", 1.0),)), "STRICT_PACK")


PLACEMENTS: Mapping[PlacementMode, Callable[[float], Placement]] = {
    "cpu": _cpu,
    "gpu": _gpu,
    "split": _split,
}


def mode_for_gpus(num_gpus: int, in_process: bool = False) -> PlacementMode:
    if num_gpus == 0:
        return "cpu"
    return "gpu" if num_gpus == 1 or in_process else "split"


def placement_for(devices: str, *, cpus_per_run: float, cluster_gpus: float, cpu_fallback: bool = False,
                  in_process: bool = False, gpu_share: float = 1.0) -> tuple[Placement, str]:
    """The placement of a run and a warning ("" if none). CPU instead of GPUs only with `cpu_fallback`;
    `in_process`: all GPUs in one bundle for the run's own process, never split actors; `gpu_share`:
    the GPU of a one-GPU run packed with others (`[campaign] runs_per_gpu`: 1/N)."""
    wanted = parse_devices(devices)
    if wanted > 0 and cluster_gpus <= 0 and cpu_fallback:
        warning = (
            f"backend.devices = {devices!r} asks for {wanted} GPU(s) but the Ray cluster has none: "
            "running on CPU as [campaign] cpu_fallback = true asks (set backend.devices = 'cpu' to silence this)"
        )
        return PLACEMENTS["cpu"](cpus_per_run), warning
    if in_process and wanted > 1:
        return _gpu(cpus_per_run, wanted), ""
    if wanted == 1 and gpu_share < 1.0:
        return _gpu(cpus_per_run, gpu_share), ""
    return PLACEMENTS[mode_for_gpus(wanted)](cpus_per_run), ""


def _fits_on_node(bundles: Sequence[Bundle], node: Mapping[str, float]) -> bool:
    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    return all(node.get(k, 0.0) >= v for k, v in need.items())


def _shortfall(placement: Placement, nodes: Sequence[Mapping[str, float]]) -> str:
    """'' if some node can hold the run (all bundles, as STRICT_PACK needs), else what is missing."""
    bundles = placement.bundle_dicts
    if any(_fits_on_node(bundles, n) for n in nodes):
        return ""
    need = {k: sum(b.get(k, 0.0) for b in bundles) for k in {k for b in bundles for k in b}}
    best = {k: max((n.get(k, 0.0) for n in nodes), default=0.0) for k in need}
    return ", ".join(f"{k}: need {need[k]:g} on one node, largest node has {best[k]:g}" for k in sorted(need))


def check_fits(placement: Placement, nodes: Sequence[Mapping[str, float]]) -> str:
    """'' if some node can hold the run (all bundles, as STRICT_PACK needs), else an error message."""
    missing = _shortfall(placement, nodes)
    if not missing:
        return ""
    return (
        f"no node of the Ray cluster can hold a {placement.mode!r} run ({missing}); "
        "add a bigger node, lower [campaign].cpus_per_run, or change [backend].devices"
    )


@dataclass(frozen=True)
class PlacementDecision:
    """What `_place` does with one run: its placement, and at most one of a warning, a wait, an error."""

    placement: Placement
    warning: str = ""  # rewritten to CPU (only with cpu_fallback)
    wait: str = ""  # no node fits now: the autoscaler is asked (through Tune's placement group)
    problem: str = ""  # no node fits and nothing can add one


def decide_placement(devices: str, *, cpus_per_run: float, nodes: Sequence[Mapping[str, float]],
                     cpu_fallback: bool, can_scale: bool, in_process: bool = False,
                     gpu_share: float = 1.0) -> PlacementDecision:
    """The placement of one run on a cluster whose alive nodes are `nodes` (pure: no Ray calls)."""
    cluster_gpus = sum(n.get("GPU", 0.0) for n in nodes)
    placement, warning = placement_for(devices, cpus_per_run=cpus_per_run, cluster_gpus=cluster_gpus,
                                       cpu_fallback=cpu_fallback, in_process=in_process, gpu_share=gpu_share)
    missing = _shortfall(placement, nodes)
    if not missing:
        return PlacementDecision(placement, warning=warning)
    if can_scale:
        return PlacementDecision(placement, warning=warning, wait=f"no alive node can hold a {placement.mode!r} "
                                 f"run yet ({missing}): waiting for the cluster's autoscaler")
    fix = ""
    if placement.num_gpus and cluster_gpus <= 0:
        fix = ("; this Ray has no GPU and nothing can add one: set backend.devices = 'cpu', set [campaign] "
               "cpu_fallback = true to run GPU runs on CPU, or pass the address of a GPU cluster")
    return PlacementDecision(placement, warning=warning, problem=check_fits(placement, nodes) + fix)

