"""What the benchmarks share and measure with, apart from the apps they run (``bench/apps``)."""
