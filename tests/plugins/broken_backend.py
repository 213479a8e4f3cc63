"""A plugin backend whose module does not import (tests/test_plugin_backend.py)."""

import retrain_ray_no_such_dependency  # noqa: F401


def make_backend(config, context):
    raise AssertionError("never reached")
