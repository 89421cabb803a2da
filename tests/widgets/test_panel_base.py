from widgets.panels.base import Throttle


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_first_call_passes_then_waits_for_the_interval():
    clock = FakeClock()
    throttle = Throttle(0.25, clock)
    assert throttle.ready()
    clock.now += 0.1
    assert not throttle.ready()
    clock.now += 0.15
    assert throttle.ready()
    assert not throttle.ready()


def test_force_and_reset_let_a_call_through():
    clock = FakeClock()
    throttle = Throttle(1.0, clock)
    assert throttle.ready()
    assert throttle.ready(force=True)
    assert not throttle.ready()
    throttle.reset()
    assert throttle.ready()


def test_rate_is_bounded_over_a_burst():
    clock = FakeClock()
    throttle = Throttle(0.25, clock)
    accepted = 0
    for _ in range(1000):  # 1000 calls over 10 s
        accepted += throttle.ready()
        clock.now += 0.01
    assert 38 <= accepted <= 41
