"""A reward plugin (original signature) whose scores differ between completions, so no step is skipped
for tied rewards (tests/test_plugin_backend.py, tests/test_plugin_engine.py)."""


class CharSum:
    def __init__(self, config):
        self.modulus = 97

    def score(self, response: str, reference: str) -> float:
        return (sum(map(ord, response)) % self.modulus) / self.modulus


def make(config):
    return CharSum(config)
