"""Layer 1: the benchmark data (load, validate, select, category names); no judging, nothing of the method."""
