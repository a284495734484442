"""The EnSIMem reproduction harness, in layers; imports point down only (``tests/test_architecture.py``).

``core`` (config, artifacts, LLM client, embeddings, ...) <- ``method`` (EnSIMem and the baselines)
and ``benchmarks`` (data only) <- ``evaluation`` (judges, metrics, statistics) <- ``pipeline``
(the stage graph, its engine, CLI, runner, ledger, dry run) <- ``report`` (tables, figures,
comparisons) <- ``demo`` (the offline demo).
"""
