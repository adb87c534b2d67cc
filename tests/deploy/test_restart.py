"""The restart policy and the exit labels the supervisor reports (pure)."""

from __future__ import annotations

import signal

from deploy.restart import EngineState, RestartPolicy, exit_label


def test_the_backoff_doubles_per_consecutive_failure_up_to_the_cap() -> None:
    policy = RestartPolicy(base_s=1.0, cap_s=10.0)
    assert [policy.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_it_gives_up_after_max_restarts_consecutive_failures() -> None:
    policy = RestartPolicy(max_restarts=3)
    assert [policy.gives_up(n) for n in range(1, 6)] == [False, False, False, True, True]
    assert RestartPolicy(max_restarts=0).gives_up(1)


def test_a_long_life_ends_the_streak() -> None:
    policy = RestartPolicy(stable_s=300.0)
    assert policy.streak(0, lived_s=0.5) == 1
    assert policy.streak(3, lived_s=299.0) == 4  # died soon after its restart: the streak goes on
    assert policy.streak(3, lived_s=300.0) == 1  # served five minutes: a fresh first failure
    assert policy.delay(policy.streak(4, lived_s=86_400.0)) == policy.base_s


def test_exit_labels_name_signals() -> None:
    assert exit_label(None) is None
    assert exit_label(0) == 0
    assert exit_label(7) == 7
    assert exit_label(-signal.SIGILL) == "SIGILL"
    assert exit_label(-signal.SIGKILL) == "SIGKILL"
    assert exit_label(-200) == "signal 200"


def test_the_view_holds_what_health_shows() -> None:
    state = EngineState(state="restarting", restarts=2, last_exit="SIGILL", failures=3)
    assert state.view() == {"state": "restarting", "restarts": 2, "last_exit": "SIGILL"}
