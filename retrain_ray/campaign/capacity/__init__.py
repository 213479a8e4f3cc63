"""How long a campaign takes: calibration figures from a pilot's logs, the wall-time estimate, and
`retrain-ray explain`'s capacity section."""
