"""How long a campaign takes: calibration figures from a pilot's logs, the wall-time estimate, and
`retrain-ray explain`'s capacity section (which shows the plan `build_plan` makes); how runs pack onto
GPUs; and placement planning, the bundles a run asks Ray for (pure: campaign/local_ray.py asks Ray)."""
