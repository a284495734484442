"""Layer 1: the memory methods (EnSIMem stages 02-07 and the baselines).

They never see gold, labels or the benchmark's name.
"""
