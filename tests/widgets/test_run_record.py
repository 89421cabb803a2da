import numpy as np
import pytest

from widgets.run_record import DecimatingBuffer


def test_memory_is_bounded_and_rows_stay_evenly_spaced():
    buffer = DecimatingBuffer(8)
    for i in range(1000):
        buffer.append({"step": i})
    steps = buffer.columns(("step",))["step"]
    assert len(buffer) <= 8
    assert steps[0] == 0
    assert len(set(np.diff(steps))) == 1
    assert buffer.latest == {"step": 999}
    assert steps[-1] > 700


def test_short_histories_are_kept_whole():
    buffer = DecimatingBuffer(10)
    for i in range(10):
        buffer.append({"x": np.array([i, i])})
    assert buffer.columns(("x",))["x"].shape == (10, 2)


def test_empty_columns_and_bad_capacity():
    assert DecimatingBuffer(2).columns(("a",))["a"].shape == (0,)
    with pytest.raises(ValueError):
        DecimatingBuffer(1)
