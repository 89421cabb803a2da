"""Fixtures of the fault-injection tests (the helpers are in :mod:`fault_runs`)."""

from fault_runs import reference_runs  # noqa: F401 - a fixture
