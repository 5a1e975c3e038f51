"""streamapp: a Faust-style stream-processing framework whose assignment keeps state where it lives."""
