"""The app factory's tuning of a serving process (`gateway.edge.app`): a process that serves the
gateway alone (`tune_process`: `plumbline serve`, the uvicorn factory) hands the GIL over after
`GIL_SWITCH_S` and tunes its collector; an app built anywhere else leaves both as they were."""

from __future__ import annotations

import gc
import sys

import pytest
from starlette.testclient import TestClient

from gateway.edge.app import GIL_SWITCH_S, create_app
from tests.harness import config_from


def test_a_serving_process_hands_the_gil_over_sooner_and_an_embedding_one_is_left_alone() -> None:
    switch, threshold = sys.getswitchinterval(), gc.get_threshold()
    config = config_from({"store": {"enabled": False}})
    try:
        # CPython's own: another test may have served a tuned app in this process already.
        sys.setswitchinterval(0.005)
        gc.set_threshold(700, 10, 10)
        with TestClient(create_app(config)):
            assert sys.getswitchinterval() == pytest.approx(0.005)
            assert gc.get_threshold() == (700, 10, 10)
        with TestClient(create_app(config, tune_process=True)):
            assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_S)
            assert gc.get_threshold() == (50_000, 20, 20)
    finally:
        sys.setswitchinterval(switch)
        gc.set_threshold(*threshold)
        gc.unfreeze()
