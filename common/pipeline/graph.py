"""The stage graph, declared once: what each numbered stage runs, reads, writes and calls.

Everything that needs the list of stages reads it from here: the numbered scripts of
``LoCoMo/`` and ``LongMemEval/`` (through ``common.pipeline.cli``), the Makefile's stage loop
and per-stage targets (``python -m common.pipeline.graph ids``), the engine's whole-pipeline
run, the dry run, the ledger, the demo, the artifact table of docs/outputs.md (checked by a test) and
the tests. Functions are named by import path so that reading the graph imports no stage code
(the Makefile asks it for the stage list on every call).

Adding a stage is one ``Stage`` entry below plus its function (``run: Run -> None``); see the
section "Adding a stage" of docs/development.md.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

from common.core import artifacts
from common.core.artifacts import ARTIFACTS

GoldAccess = Literal["no", "oracle", "yes"]


@dataclass(frozen=True)
class Stage:
    """One node of the graph.

    ``reads``/``writes`` are artifact names of ``common.core.artifacts`` (or, for stages added
    by a user, plain file names inside the run directory). ``role`` is the LLM role whose
    endpoint is checked before the stage reads anything; ``role_required=False`` marks a stage
    that calls it only when its inputs ask for it (06 resolves bridges only if a plan declares
    one). ``reads_gold`` is ``"no"`` for every stage of the method, ``"oracle"`` where only the
    labelled oracle baseline may open the gold file, ``"yes"`` for judging and metrics.
    Which stages a memory system runs is the system's declaration (``MemorySystem.stages`` in
    ``common.systems``); a stage it does not use says ``skipped`` in its manifest.

    ``per_memory``: the stage works memory by memory (one Ray task per memory with ``run.executor:
    ray``; 01 reads the whole file, 08 and 09 judge and aggregate). ``loads_model``: its process
    loads the embedding model (its RSS holds the weights). ``prompt_kinds``: the prompt families
    its LLM calls use, repairs included (what the fake server and the benches count requests by).
    ``warm_imports``: modules the stage always imports that take a second or more to load; when the
    whole pipeline runs in one process they are imported in the background while the earlier stages
    wait on their endpoints (``common.pipeline.warmup``), so they are not on the run's critical path.
    """

    number: int
    name: str
    function: Union[str, Callable[[Any], None]]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    summary: str
    role: Optional[str] = None
    role_required: bool = True
    reads_gold: GoldAccess = "no"
    per_memory: bool = False
    loads_model: bool = False
    prompt_kinds: tuple[str, ...] = ()
    warm_imports: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """``03_extract``: the script name, the manifest name and the Makefile target suffix."""
        return f"{self.number:02d}_{self.name}"

    def resolve(self) -> Callable[[Any], None]:
        """The stage function (imported on first use)."""
        if callable(self.function):
            return self.function
        module, _, attr = self.function.partition(":")
        return getattr(importlib.import_module(module), attr)

    def instance(self, judge: str) -> str:
        """The name of one run of this stage (its manifest, ledger row, dry-run row): a judge stage
        runs once per judge (``08_judge_<judge>``), every other stage once (its id)."""
        return f"{self.id}_{judge}" if "judge" in self.writes else self.id

    def output(self, run_dir: Path, judge: str) -> Path:
        """The row file of one run of this stage (the judge's own file for a judge stage)."""
        if "judge" in self.writes:
            return artifacts.judge_path(run_dir, judge)
        return artifacts.path(run_dir, self.writes[0])

    def files(self, which: str = "writes") -> list[str]:
        """File names (in the run directory) of the artifacts this stage reads or writes."""
        return [ARTIFACTS[a].file if a in ARTIFACTS else a for a in getattr(self, which)]


_S = "common.pipeline.stages:"
STAGES: tuple[Stage, ...] = (
    Stage(1, "preprocess", _S + "preprocess", reads=(),
          writes=("sessions", "questions", "gold", "session_sources", "config", "fingerprint"),
          summary="read the benchmark file; write sessions, questions (question + date only) and the separate gold",
          reads_gold="yes"),
    Stage(2, "episodes", _S + "episodes", reads=("sessions",), writes=("episodes",), role="partition",
          per_memory=True, prompt_kinds=("partition", "partition_repair"),
          summary="cut each session into theme-coherent episodes"),
    Stage(3, "extract", _S + "extract", reads=("episodes", "sessions"), writes=("records",), role="extract",
          per_memory=True, prompt_kinds=("extract", "extract_repair"),
          summary="extract [entity][type][property:value] records per episode, with source turns"),
    Stage(4, "index", _S + "index", reads=("episodes", "records", "sessions"), writes=("index",),
          per_memory=True, loads_model=True,
          summary="embed episodes, records and turn chunks; write the per-memory index"),
    Stage(5, "plan", _S + "plan", reads=("questions", "index"), writes=("plans",), role="plan",
          per_memory=True, prompt_kinds=("plan", "plan_repair"),
          summary="turn each question into evidence requirements (hops, reasoning type, scope)"),
    Stage(6, "retrieve", _S + "retrieve", reads=("plans", "index", "sessions", "questions"), writes=("retrievals",),
          role="bridge", role_required=False, reads_gold="oracle", per_memory=True, loads_model=True,
          summary="select episodes (structured match + dense fallback, budget by query type); resolve bridges"),
    Stage(7, "answer", _S + "answer", reads=("questions", "plans", "retrievals"), writes=("answers",), role="answer",
          per_memory=True, prompt_kinds=("answer",),
          summary="answer from the ORIGINAL episodes in the evidence buffer"),
    Stage(8, "judge", _S + "judge", reads=("answers", "gold"), writes=("judge",), role="judge", reads_gold="yes",
          prompt_kinds=("judge_locomo", "judge_lme"),
          summary="LLM judge of each scored answer (one file per judge, never averaged)"),
    Stage(9, "aggregate", _S + "aggregate", reads=("judge", "gold", "answers", "retrievals"),
          writes=("metrics", "ledger", "tables"),
          # bootstrap CIs and power (scipy, statsmodels), LoCoMo's stemmed F1 (nltk): ~1.5 s of imports
          warm_imports=("scipy.stats", "statsmodels.stats.proportion", "statsmodels.stats.power", "nltk.stem"),
          reads_gold="yes", summary="accuracy with k/n and CI, diagnostics, ledger and tables"),
)


# Stage name -> id (``"extract"`` -> ``"03_extract"``), for code that names a stage's manifest.
IDS = {s.name: s.id for s in STAGES}


def by_name(name: str, stages: tuple[Stage, ...] = STAGES) -> Stage:
    """A stage by ``name`` (``extract``) or id (``03_extract``)."""
    for s in stages:
        if name in (s.name, s.id):
            return s
    raise KeyError(f"no stage {name!r}; known: {', '.join(s.id for s in stages)}")


def memory_stages(stages: tuple[Stage, ...] = STAGES) -> tuple[Stage, ...]:
    """The stages that work memory by memory (``Stage.per_memory``), in order."""
    return tuple(s for s in stages if s.per_memory)


def llm_stages(stages: tuple[Stage, ...] = STAGES) -> list[Stage]:
    """Stages that may call an LLM, in order (the ledger's and the dry run's rows)."""
    return [s for s in stages if s.role]


BENCHMARKS = {"LoCoMo": ("locomo", "configs/locomo.yaml"), "LongMemEval": ("longmemeval", "configs/longmemeval.yaml"),
              "BEAM": ("beam", "configs/beam.yaml"), "REALTALK": ("realtalk", "configs/realtalk.yaml"),

              "LoCoMoPlus": ("locomo_plus", "configs/locomo_plus.yaml")}


def script_header(stage: Stage, folder: str) -> str:
    """The Reads/Writes/role lines every numbered script's docstring carries (checked by a test)."""
    reads = ", ".join(stage.files("reads")) or "the benchmark file (data.path)"
    role = "none" if not stage.role else stage.role + ("" if stage.role_required else
                                                       " (only when a plan declares a bridge)")
    _, config = BENCHMARKS[folder]
    writes = f"Writes: {', '.join(stage.files())} (and {stage.id}.manifest.json)"
    if len(writes) > 120:  # keep the scripts' docstrings within the line limit
        files = f"Writes: {', '.join(stage.files())}"
        if len(files) > 120:
            files = textwrap.fill(files, 120, subsequent_indent="  ", break_on_hyphens=False)
        writes = f"{files}\n  (and {stage.id}.manifest.json)"
    return (f"Reads: {reads}\n{writes}\n"
            f"LLM role: {role}\n\n"
            f"Run from the repository root: python -m {folder}.{stage.id} [--config {config}] [--set key=value]\n")


def write_scripts(root: Path, stages: tuple[Stage, ...] = STAGES) -> list[Path]:
    """Create the thin numbered script of each stage that has none yet (existing ones are kept)."""
    made = []
    for folder, (benchmark, _) in BENCHMARKS.items():
        for s in stages:
            path = root / folder / f"{s.id}.py"
            if path.exists():
                continue
            path.write_text(f'"""{s.id} ({folder}): {s.summary}.\n\n{script_header(s, folder)}"""\n'
                            f"from common.pipeline import cli\n\n"
                            f'if __name__ == "__main__":\n'
                            f'    cli.main("{s.id}", benchmark="{benchmark}", doc=__doc__)\n', encoding="utf-8")
            made.append(path)
    return made


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.pipeline.graph", description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("ids", "names", "table", "scripts"),
                   help="ids: 01_preprocess ...; table: one line a stage; scripts: create missing numbered scripts")
    a = p.parse_args(argv)
    if a.what == "scripts":
        for path in write_scripts(Path(__file__).resolve().parents[2]):
            print(f"created {path}")
    elif a.what == "ids":
        print(" ".join(s.id for s in STAGES))
    elif a.what == "names":
        print(" ".join(s.name for s in STAGES))
    else:
        for s in STAGES:
            print(f"{s.id}\treads {', '.join(s.files('reads')) or '-'}\twrites {', '.join(s.files())}"
                  f"\trole {s.role or '-'}\tgold {s.reads_gold}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
