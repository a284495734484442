"""Memory systems behind one interface: EnSIMem, the harness's baselines and outside systems."""
