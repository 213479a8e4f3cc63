"""The adaptive campaign's quiet Tune reporter (campaign/experiment.py, `QuietTuneStart`) and the reporter Tune
appends after it: a trial that errors must end the experiment normally, not crash the driver in Tune's own
reporter (whose start time Tune leaves unset when another reporter comes first)."""

from __future__ import annotations

from ray import tune

from retrain_ray.campaign.experiment import QuietTuneStart


def test_a_trial_error_after_the_quiet_reporter_ends_the_experiment_normally(ray_4cpu_4gpu, tmp_path, capsys):
    def _fails(config: dict[str, int]) -> None:  # local, so Ray pickles it by value for the trial's worker
        raise RuntimeError(f"trial {config['x']} fails on purpose")

    callbacks: list[tune.Callback] = []
    callbacks.insert(0, QuietTuneStart(callbacks))
    tuner = tune.Tuner(_fails, param_space={"x": tune.grid_search([1])},
                       run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=callbacks,
                                                 failure_config=tune.FailureConfig(max_failures=0)))
    results = tuner.fit()
    assert results.num_errors == 1
    assert "fails on purpose" in str(results.errors[0])
    shown = capsys.readouterr().out
    assert "errored after 0 iterations" in shown  # Tune's own reporter ran, with a start time
    assert "Number of trials" not in shown
