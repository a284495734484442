"""Layer 0: what every other layer stands on (config, artifacts, rows, JSONL I/O, the LLM client, embeddings,
tokens, prompts, fingerprints)."""
