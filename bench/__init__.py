"""`make bench`: side-by-side performance figures of the harness (not timed tests).

``python -m bench.run`` runs the LoCoMo pipeline against the local fake OpenAI-compatible server
(``tests/fake_openai/``) with a fixed per-call latency and writes ``results/bench/bench.json``
(raw numbers) and ``results/bench/bench.md`` (one table per item, target vs measured):

1. LLM-bound throughput of stages 02, 03, 05, 07, 08 (wall / (calls x L / concurrency)), plus
   one conversation at concurrency 1 and 16;
2. per-question latency of 06_retrieve over one real conversation's index;
3. the warm rerun (`make locomo` again on the same config: LLM calls and wall time);
4. peak RSS of the stage processes of the full run, model weights declared.

``python -m bench.scale`` (`make bench-scale`) runs LongMemEval 01-09 on a generated haystack set
(``bench.scale_data``) and ``python -m bench.embedding_speed`` (`make bench-embeddings`) measures the
index build's texts/s per embedding runtime; both write next to bench.json.
"""
