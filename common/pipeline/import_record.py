"""What an import records about its source: the published prompts' hashes, the accuracy the file's
own rows give beside the one it states, what it covers, and ``source.json``."""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, Optional

from common.core.io import sha256_file
from common.core.yamlio import load_yaml
from common.evaluation.claims import Claim
from common.evaluation.coverage import Coverage
from common.pipeline import formats

SOURCE_FILE = "source.json"  # in the run directory: where the rows came from, the claim, unmapped rows


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def published_prompts(source: Path, prompts: Optional[Path], answer_prompt: Optional[str]) -> dict[str, Any]:
    """sha256 of the published judge prompt (system + user) and answer prompt, from ``prompts.yaml``.

    Without ``prompts`` the file is looked for next to the source and up to three folders above it
    (its place in the locomo-audit repository); not found is recorded, never guessed.
    """
    if prompts is None:
        for parent in list(source.resolve().parents)[:4]:
            if (parent / "prompts.yaml").exists():
                prompts = parent / "prompts.yaml"
                break
    if prompts is None:
        return {"file": None, "note": "prompts.yaml not found: the published prompts are not fingerprinted"}
    data = load_yaml(prompts.read_text(encoding="utf-8")) or {}
    judge = data.get("llm_judge") or {}
    out: dict[str, Any] = {"file": str(prompts), "file_sha256": sha256_file(prompts)}
    if judge:
        out["judge_prompt_sha256"] = _sha(f"{judge.get('system_prompt', '')}\n{judge.get('user_prompt', '')}")
    answers = (data.get("online_api") or {}).get("default") or {}
    if answer_prompt:
        text = answers.get(answer_prompt)
        out["answer_prompt"] = answer_prompt
        out["answer_prompt_sha256"] = _sha(text) if isinstance(text, str) else None
    return out


def own_accuracy(parsed: Optional[formats.Parsed], rows: list[tuple[str, str, Optional[str], list[Optional[int]]]]
         ) -> dict[str, Any]:
    """The number the file's own code prints, recomputed from ALL its rows (before any selection)."""
    if parsed is not None:
        return parsed.own_accuracy()
    n_runs = len(rows[0][3]) if rows else 0
    if not n_runs:
        return {"accuracy": None, "rule": "no published labels"}
    per_run = [sum(1 for r in rows if r[3][i] == 1) for i in range(n_runs)]
    n = len(rows)
    return {"k_per_run": per_run, "n": n, "accuracy": sum(k / n for k in per_run) / n_runs, "rows": n,
            "excluded": 0, "rule": "mean over judge runs of correct rows / all rows" if n_runs > 1
            else "correct rows / all rows"}


def stated_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The accuracy a locomo-audit file's ``metadata`` states (its own code's printed number)."""
    return {f"metadata.{k}": v for k, v in meta.items() if k in ("mean_accuracy", "overall_accuracy", "accuracy")}


def _decimals(value: float) -> int:
    text = repr(float(value))
    return len(text.split(".")[1]) if "." in text and "e" not in text else 6


def stated_checks(stated: dict[str, Any], own: dict[str, Any]) -> list[dict[str, Any]]:
    """Every accuracy the file states (a top-level ``*accuracy*`` number) beside the one its own rows give.

    A stated value above 1 is a percentage. It is reproduced when the rows' accuracy, rounded
    to the stated value's decimals, is the stated value; otherwise the import says so.
    """
    mine = own.get("accuracy")
    out: list[dict[str, Any]] = []
    for key, value in stated.items():
        if "accuracy" not in key.lower() or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        scale = 100.0 if value > 1 else 1.0
        d = _decimals(value)
        reproduced = mine is not None and abs(round(scale * mine, d) - value) < 0.5 * 10 ** -d + 1e-12
        out.append({"field": key, "stated": value, "own": mine, "scale": "percent" if scale == 100 else "fraction",
                    "reproduced": reproduced, "rule": own.get("rule")})
    return out


def what_it_covers(cov: Coverage, benchmark: str, checked: list[dict[str, Any]]) -> list[str]:
    """The import's lines on what it covers and whether the file's stated figure is its rows' own."""
    lines = [f"import: covers {cov.text} scored {benchmark} questions"
             + (f" (PARTIAL {cov.text}: the questions without a row count as missing, not as answered)"
                if cov.partial else "")]
    for c in checked:
        own = "n/a" if c["own"] is None else f"{100 * c['own']:.2f}%"
        if not c["reproduced"]:
            lines.append(f"import: WARNING: the file states {c['field']}: {c['stated']} but its own rows give {own} "
                         f"({c['rule']}): the stated figure is not reproduced")
    return lines


def source_record(source: Path, sha: str, fmt: str, judge: str, claim: Optional[Claim],
                   origin: Optional[dict[str, Optional[str]]], parsed: Optional[formats.Parsed],
                   own: dict[str, Any], outside: int) -> dict[str, Any]:
    """``source.json``: where the rows came from, the claim they back, and every row not mapped."""
    stated = claim.per_question if claim is not None else None
    where = {k: (origin or {}).get(k) or (getattr(stated, k) if stated is not None else None) or "not stated"
             for k in ("repository", "path", "commit")}
    out: dict[str, Any] = {"file": str(source), "sha256": sha, "format": fmt, "judge": judge, "origin": where,
                           "claim": claim.to_dict() if claim is not None else None, "own_accuracy": own,
                           "rows_outside_selection": outside}
    if stated is not None and stated.sha256 and stated.sha256 != sha:
        out["sha256_differs_from_claim"] = stated.sha256
    if parsed is not None:
        m = parsed.mapping
        out["mapping"] = m.summary()
        out["unmapped"] = [dataclasses.asdict(u) for u in m.unmapped]
        by_where = {r.where: r for r in parsed.rows}
        # Their labels and exclusions: the file's own number counts them (make claims recomputes it).
        out["unmapped_labels"] = {u.where: {"label": by_where[u.where].label, "excluded": by_where[u.where].excluded}
                                  for u in m.unmapped}
        out["category_differs"], out["gold_differs"] = m.category_differs, m.gold_differs
        out["stated"] = parsed.stated
    else:
        out["mapping"] = {"rows": own.get("rows"), "mapped": own.get("rows"), "unmapped": 0,
                          "note": "every row names its question id"}
        out["unmapped"] = []
    return out
