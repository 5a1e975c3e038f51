"""Apps the benchmarks run as worker processes (not benchmarks themselves: `make bench` runs
``bench/*.py`` only)."""
