"""Each fault scenario of benchmarks/faults.py once, through the same code (tests/fault_scenarios*.py);
`extended` (several minutes in all). The benchmark repeats them with random faults and publishes the
figures in docs/reliability.md."""

from __future__ import annotations

import random

import fault_scenarios as fs
import fault_scenarios_cli as fcli
import fault_scenarios_control as fctl
import fault_scenarios_io as fio
import fault_scenarios_split as fss
import pytest

pytestmark = pytest.mark.extended


def _check(trials: list[fs.Trial], count: int) -> None:
    assert len(trials) == count
    for trial in trials:
        print(trial)
        assert trial.passed, trial.detail


def test_a_run_killed_at_a_random_step_completes_with_the_uninterrupted_weights(ray_4cpu_4gpu, tmp_path):
    _check(fs.run_kill(1, random.Random(1), tmp_path), 1)


def test_a_split_run_that_loses_its_sampler_or_trainer_completes_with_the_uninterrupted_weights(
        ray_4cpu_4gpu, tmp_path):
    _check(fss.split_actor_kill(2, random.Random(8), tmp_path), 2)  # 2 trials: each role once


def test_a_killed_driver_run_again_finishes_without_rerunning_finished_runs(tmp_path):
    _check(fs.driver_kill(1, random.Random(2), tmp_path), 1)


def test_a_run_on_a_removed_node_finishes_on_another(tmp_path):
    _check(fs.node_removal(1, random.Random(3), tmp_path), 1)


def test_killed_lease_holders_among_32_clients_are_reclaimed_within_ttl(ray_4cpu_4gpu, tmp_path):
    _check(fio.throttle_kills(3, random.Random(4), tmp_path), 3)


def test_a_campaign_completes_against_an_endpoint_failing_a_fifth_of_its_calls(ray_4cpu_4gpu, tmp_path):
    _check(fio.failing_endpoint(1, random.Random(5), tmp_path), 1)


def test_a_full_disk_is_a_clear_error_and_resume_completes_the_run(tmp_path):
    _check(fio.disk_full(1, random.Random(6), tmp_path), 1)


def test_a_read_only_run_directory_is_a_clear_error_and_changes_nothing(tmp_path):
    _check(fio.read_only(1, random.Random(7), tmp_path), 1)


def test_train_interrupted_at_a_random_step_exits_130_or_143_and_its_command_completes_it(tmp_path):
    _check(fcli.train_interrupt(1, random.Random(9), tmp_path), 1)


def test_a_second_writer_on_a_run_directory_in_use_is_refused_and_the_first_logs_each_step_once(tmp_path):
    _check(fcli.second_writer(1, random.Random(10), tmp_path), 1)


def test_sigterm_to_a_campaign_driver_exits_143_or_129_and_resume_completes_it(tmp_path):
    _check(fctl.driver_sigterm(1, random.Random(11), tmp_path), 1)


def test_a_recorder_killed_mid_campaign_comes_back_and_costs_no_run(ray_4cpu_4gpu, tmp_path):
    _check(fctl.recorder_kill(1, random.Random(12), tmp_path), 1)


def test_a_trial_tune_errors_at_an_adaptive_rung_is_counted_and_the_campaign_ends(ray_4cpu_4gpu, tmp_path):
    _check(fctl.adaptive_trial_error(1, random.Random(13), tmp_path), 1)
