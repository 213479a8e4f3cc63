"""`python -m retrain_ray ...`: the same as the `retrain-ray` console script."""

import sys

from retrain_ray.cli import main

sys.exit(main())
