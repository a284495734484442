"""Layer 4: tables, figures and comparisons built from finished run directories (no LLM call)."""
