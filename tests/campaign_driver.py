"""A campaign driver for tests that kill it: the real Campaign, with each step slowed down.

    python tests/campaign_driver.py CAMPAIGN.toml --root DIR [--step-delay 0.4]

Runs `Campaign.from_toml(...).run()` in this process (its own local Ray, as the CLI does). The
runner is `train_run` plus an observer that sleeps after every logged step, so a test can kill the
driver at a known point of a tiny campaign. The runner is defined in `__main__`, so Ray pickles it
by value and the trial workers need not import this file.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from retrain_ray.logs.types import RunObserver


class SlowSteps(RunObserver):
    """RunObserver that sleeps after every step row."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def on_step(self, row, **info: Any) -> None:
        time.sleep(self.delay_s)


def make_runner(delay_s: float):
    def slow_runner(config, **kwargs):
        from retrain_ray.run.train import train_run

        kwargs["observers"] = [*kwargs["observers"], SlowSteps(delay_s)]
        return train_run(config, **kwargs)

    return slow_runner


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--root", required=True)
    parser.add_argument("--step-delay", type=float, default=0.4)
    args = parser.parse_args(argv)
    from retrain_ray.campaign import Campaign

    campaign = Campaign.from_toml(args.config, root=args.root, runner=make_runner(args.step_delay))
    results = campaign.run()
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
