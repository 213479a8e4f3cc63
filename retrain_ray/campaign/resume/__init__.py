"""Recovery of a campaign: where each run continues from (`point.decide_resume`), its own checkpoints and
Tune's set-aside copies, a torn Tune state, an interrupted driver, an extended campaign."""
