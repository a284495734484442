"""The files of a run directory: one name per artifact, and where older runs kept them.

Every stage's JSONL artifact is named after the stage that writes it (``03_extract`` writes
``03_extract.jsonl`` and ``03_extract.manifest.json``); ``01_preprocess`` writes three files
and ``08_judge`` one per judge. Runs made before this naming used other names for four files
(``LEGACY``): readers resolve those transparently, and a resumed stage appends to the file the
run already has, so an old run is never split across two names.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Artifact:
    """One file of a run directory."""

    name: str  # the key code uses: run.path("answers")
    file: str  # the file name in the run directory
    description: str  # one line for the artifact table of docs/outputs.md
    gold: bool = False  # holds answers or evidence: only judging, metrics and the oracle may read it


ARTIFACTS: dict[str, Artifact] = {a.name: a for a in (
    Artifact("sessions", "01_sessions.jsonl", "one row per session: turns with ids, speakers, dates, image captions"),
    Artifact("questions", "01_questions.jsonl", "question id, memory id, question text and date; nothing else"),
    Artifact("gold", "01_gold.jsonl", "gold answer, category/type, evidence ids (read by 08, 09 and the oracle only)",
             gold=True),
    Artifact("session_sources", "01_session_sources.jsonl", "official session id of each session that has one "
             "(LongMemEval; read by the metrics and the oracle only)", gold=True),
    Artifact("episodes", "02_episodes.jsonl", "per session: its theme-coherent episodes (turn spans, theme)"),
    Artifact("records", "03_extract.jsonl", "per episode: [entity][type][property:value] records with source turns"),
    Artifact("index", "04_index.jsonl", "per memory: the index fingerprint and its directory 04_index/<memory>/"),
    Artifact("plans", "05_plan.jsonl", "per question: the planner's evidence requirements (hops, scope, anchors)"),
    Artifact("retrievals", "06_retrieve.jsonl", "per question: selected episodes, routes, scores, the evidence buffer"),
    Artifact("answers", "07_answer.jsonl", "per question: the answer model's reply, tokens, latency, error"),
    Artifact("judge", "08_judge_{judge}.jsonl", "per scored question and judge: label, raw reply, error", gold=True),
    Artifact("metrics", "metrics.json", "accuracy with k/n and CI, failures by cause, diagnostics, coverage"),
    Artifact("ledger", "ledger.json", "calls, tokens, cost and latency per stage and role; Table 3 per question "
             "(and ledger.md)"),
    Artifact("tables", "table_{judge}.md", "the run's Table 1/2 row per judge with its score note (and .csv)"),
    Artifact("config", "config.resolved.yaml", "the full resolved config of the run"),
    Artifact("fingerprint", "fingerprint.json", "the protocol fingerprint's components (run and each judge)"),
)}

# File names used by runs made before the stage-named artifacts (read and resumed in place).
LEGACY = {"records": "03_records.jsonl", "plans": "05_plans.jsonl", "retrievals": "06_retrievals.jsonl",
          "answers": "07_answers.jsonl"}

JUDGE_PREFIX = "08_judge_"


def path(run_dir: Path, name: str) -> Path:
    """The file of artifact ``name`` in ``run_dir`` (an older run's name if only that exists).

    A name that is not an artifact key is taken as a file name inside the run directory.
    """
    artifact = ARTIFACTS.get(name)
    if artifact is None:
        return run_dir / name
    current = run_dir / artifact.file
    legacy = LEGACY.get(name)
    if legacy and not current.exists() and (run_dir / legacy).exists():
        return run_dir / legacy
    return current


def judge_path(run_dir: Path, judge: str) -> Path:
    """``08_judge_<judge>.jsonl``: one file per judge, never averaged."""
    return run_dir / ARTIFACTS["judge"].file.format(judge=judge)


def judges(run_dir: Path) -> list[str]:
    """Names of the judges that have a file in ``run_dir``, sorted."""
    return sorted(p.name[len(JUDGE_PREFIX):-len(".jsonl")] for p in Path(run_dir).glob(f"{JUDGE_PREFIX}*.jsonl"))


def manifest_path(run_dir: Path, stage: str) -> Path:
    """``<stage>.manifest.json``: what a stage read and wrote, with counts and the resolved config."""
    return run_dir / f"{stage}.manifest.json"
