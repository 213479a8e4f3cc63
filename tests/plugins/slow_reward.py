"""A reward plugin (original signature) that takes 20 ms per completion and scores completions apart (no
step is skipped for tied rewards): a tiny run's steps then last long enough for a test to act between
them, through the real CLI (tests/test_one_writer.py, tests/test_interrupts.py)."""

import time


class SlowCharSum:
    def __init__(self, config):
        self.modulus = 97

    def score(self, response: str, reference: str) -> float:
        time.sleep(0.02)
        return (sum(map(ord, response)) % self.modulus) / self.modulus


def make(config):
    return SlowCharSum(config)
