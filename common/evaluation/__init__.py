"""Layer 2: judges, metrics, statistics, and each benchmark's aggregation; reads gold."""
