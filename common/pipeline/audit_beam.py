"""``make audit-judge-beam``: the BEAM rubric judge fed known-wrong answers (common.evaluation.beam).

Reads a BEAM run's gold file (``01_gold.jsonl`` from ``make beam``), gives every question another
question's ideal answer (same ability, another chat), scores it with the official rubric scorer
under the configured judge, and writes ``audit.md`` and ``audit.json``: how often the judge still
gives 1.0 or 0.5. Every call is cached (role judge); ``--dry-run`` only counts them.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from tqdm import tqdm

from common.core.config import ConfigError, load_config, resolve_path
from common.core.io import read_jsonl
from common.core.llm import EndpointNotConfigured, LLMClient, ResponseCache, RetryPolicy
from common.core.schema import AnswerRow, Gold, from_dict, to_dict
from common.evaluation import beam


def run_audit(client: LLMClient, judge: str, golds: list[Gold], opts: beam.Options) -> list:
    wrong = beam.wrong_answers(golds)
    rows = []
    for g in tqdm(golds, desc="audit-judge-beam", disable=not sys.stderr.isatty()):
        answer = AnswerRow(qid=g.qid, memory_id=g.memory_id, question=str(g.details.get("question", "")),
                           answer=wrong.get(g.qid), model="known-wrong", prompt_id="audit")
        rows.append(beam.judge_beam(client, judge, answer, g, opts))
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.pipeline.audit_beam", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--gold", required=True, help="a BEAM run's 01_gold.jsonl")
    p.add_argument("--out", default="results/audit")
    p.add_argument("--dry-run", action="store_true", help="count the judge calls, make none, write nothing")
    a = p.parse_args(argv)
    try:
        cfg = load_config(a.config, a.set)
        path = resolve_path(a.gold)
        golds = [from_dict(Gold, r) for r in read_jsonl(path)]
        for g in golds:
            if not g.rubric:
                raise ValueError(f"{path}: question {g.qid} has no field 'rubric' (not a BEAM gold file?)")
        opts = beam.options(cfg)
        if a.dry_run:
            print(json.dumps(beam.judge_calls(golds, opts.fill_question)))
            return 0
        c = cfg.llm
        cache = ResponseCache(c.cache_url or str(resolve_path(c.cache_path)), c.cache_mode)
        client = LLMClient({"judge": cfg.role("judge")}, cache=cache,
                           retry=RetryPolicy(c.max_attempts, c.initial_wait, c.max_wait), concurrency=c.concurrency)
        client.check_endpoints(("judge",))
        rows = run_audit(client, cfg.judge.name, golds, opts)
    except (ConfigError, EndpointNotConfigured, ValueError, FileNotFoundError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    out = resolve_path(a.out) / f"beam-{cfg.judge.name}"
    out.mkdir(parents=True, exist_ok=True)
    report = beam.audit_report(rows)
    (out / "audit.json").write_text(json.dumps({"report": report, "rows": [to_dict(r) for r in rows]}, indent=1),
                                    encoding="utf-8")
    (out / "audit.md").write_text(beam.audit_markdown(cfg.judge.name, report), encoding="utf-8")
    print((out / "audit.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
