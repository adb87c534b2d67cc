"""The silence sweep fails exactly the streams silent for longer than the limit."""

from __future__ import annotations

from gateway.errors import ReplyTimeout
from gateway.serving.silence import Silence


class FakeResponse:
    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.closed = False

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.closed = True


def test_sweep_fails_only_silent_streams() -> None:
    silence = Silence(5.0)
    quiet, busy, gone = FakeResponse(), FakeResponse(), FakeResponse()
    w_quiet = silence.watch(quiet)  # type: ignore[arg-type]
    w_busy = silence.watch(busy)  # type: ignore[arg-type]
    w_gone = silence.watch(gone)  # type: ignore[arg-type]
    w_quiet.seen, w_busy.seen, w_gone.seen = 100.0, 104.0, 90.0
    silence.forget(w_gone)  # ended normally: never swept
    assert silence.sweep(now=105.5) == 1
    assert isinstance(quiet.error, ReplyTimeout) and quiet.closed
    assert isinstance(quiet.error, TimeoutError)  # what the relay turns into "went silent"
    assert busy.error is None and gone.error is None
    assert silence.sweep(now=105.5) == 0  # a failed stream is swept once
    assert silence.sweep(now=109.5) == 1 and busy.closed


def test_interval_follows_the_limit() -> None:
    assert Silence(300).interval_s == 1.0
    assert Silence(1.0).interval_s == 0.25


def test_a_first_wait_of_its_own_moves_the_first_deadline_only() -> None:
    """A stream whose head went before its first event may wait `first_s` for it (longer or
    shorter than the limit); once a block has come, the limit applies again."""
    silence = Silence(5.0)
    longer, shorter = FakeResponse(), FakeResponse()
    w_longer = silence.watch(longer, first_s=60.0)  # type: ignore[arg-type]
    silence.watch(shorter, first_s=2.0)  # type: ignore[arg-type]
    start = w_longer.seen - 55.0  # when it was watched
    assert silence.sweep(now=start + 3.0) == 1 and shorter.closed and not longer.closed
    assert silence.sweep(now=start + 59.0) == 0
    w_longer.seen = start + 59.5  # its first block came
    assert silence.sweep(now=start + 64.0) == 0
    assert silence.sweep(now=start + 65.0) == 1 and longer.closed
