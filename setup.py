"""Package list for setuptools (everything else is in pyproject.toml).

`retrain_ray.configs` is the top-level configs/ folder, shipped in the wheel so that an installed
retrain-ray (from the wheel; an editable install reads configs/ in place) finds its example configs
with `importlib.resources.files("retrain_ray.configs")`.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["retrain_ray*"]), "retrain_ray.configs"],
    package_dir={"retrain_ray.configs": "configs"},
)
