"""Benchmarks of the engine, run from the repository root as ``python -m benchmarks.NAME``;
not part of the installed package."""
