"""The Ray side of placement: the alive nodes' resources that campaign/capacity/placement.py plans against."""

from __future__ import annotations


def alive_node_resources() -> list[dict[str, float]]:
    """Total resources of every alive node of the connected Ray cluster."""
    # deferred: loads ray, which importing this module does not need
    import ray

    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
