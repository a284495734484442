"""Layer 3: the stage graph, the engine that runs it resumably, the CLI, runners, ledger and dry run."""
