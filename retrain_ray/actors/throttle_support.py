"""Parts of the throttle actor: its name, its Prometheus gauges, and the state of a client session."""

from __future__ import annotations

import asyncio
import hashlib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field

from ray.util.metrics import Gauge

from retrain_ray.throttle.types import Lease, ThrottleStats

__all__ = ["THROTTLE_GAUGES", "Gauges", "Outcome", "Request", "Session", "throttle_name"]


def throttle_name(campaign: str, endpoint: str) -> str:
    """The actor name of `endpoint`'s throttle in `campaign`."""
    for label, value in (("campaign", campaign), ("endpoint", endpoint)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"throttle {label} must be a non-empty string, got {value!r}")
    return f"{campaign}/throttle/{endpoint}"


THROTTLE_GAUGES = ("capacity", "in_flight", "waiting", "expired_leases")  # retrain_throttle_<name>


class Gauges:
    """Prometheus gauges of one throttle (exported as ray_retrain_throttle_* by Ray's metrics agent)."""

    def __init__(self, campaign: str, endpoint: str) -> None:
        tags = ascii_tags({"campaign": campaign, "endpoint": endpoint})
        self._gauges = {}
        for name in THROTTLE_GAUGES:
            gauge = Gauge(f"retrain_throttle_{name}", description=f"throttle {name}", tag_keys=tuple(tags))
            gauge.set_default_tags(tags)
            self._gauges[name] = gauge

    def update(self, stats: ThrottleStats) -> None:
        values = (stats.capacity, stats.in_flight, stats.waiting, stats.expired)
        for gauge, value in zip(self._gauges.values(), values, strict=True):
            gauge.set(value)


Request = tuple[int, str, int, float]  # (request id, holder, count, timeout_s) of one client process
Outcome = tuple[int, "list[Lease] | BaseException"]  # (request id, leases granted, or why not)


@dataclass
class Session:
    """Queued requests and undelivered outcomes of one client process."""

    last_seen: float
    incarnation: int = 0  # changes when a dropped session's name comes back: its client asks again
    tickets: dict[int, tuple[int, float, int]] = field(default_factory=dict)  # ticket -> (request, since, count)
    ready: list[Outcome] = field(default_factory=list)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    polling: int = 0
    held: set[str] = field(default_factory=set)  # lease ids granted to this session, maybe released since
    told: tuple[int, bool, int] | None = None  # PoolState.key() its pending poll_pool knows

    def deliver(self, outcome: Outcome) -> None:
        self.ready.append(outcome)
        self.event.set()


# Ray metric tags are ASCII (its Cython layer encodes them so): a campaign, run or condition name that is
# not (`ablation-ü`, `ünï漢字🚀 x`) is spelled in ASCII for the tags only, readable and still one to one.
#
# The names themselves stay as written everywhere else: manifest, results, directories, actor names.
def ascii_tag(text: str) -> str:
    """`text` itself when ASCII; else its ASCII letters (accents dropped, others as `?`) and a short hash
    of the original, so two names that differ only outside ASCII keep two tags."""
    if text.isascii():
        return text
    folded = unicodedata.normalize("NFKD", text)
    readable = "".join(c if c.isascii() else "?" for c in folded if not unicodedata.combining(c))
    digest = hashlib.blake2s(text.encode("utf-8"), digest_size=3).hexdigest()
    return f"{readable}~{digest}"


def ascii_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """Every value of a metric's tags through `ascii_tag`."""
    return {key: ascii_tag(value) for key, value in tags.items()}
