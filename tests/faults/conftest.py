"""Fixtures of the fault-injection tests (the helpers are in :mod:`faults.fault_runs`)."""

from faults.fault_runs import reference_runs  # noqa: F401 - a fixture
