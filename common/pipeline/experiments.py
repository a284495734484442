"""The list of runs behind the paper's tables and figures (``configs/experiments.yaml``).

One file names every run: the headline run, the harness's own baselines and the ablation
variants, each as config overrides on top of the benchmark's main config. Runners
(``make baselines``, ``make ablations``) and readers (``make tables``, ``make figures``) both go
through this module, so a table can never read a run that the runner named differently.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from common.benchmarks.subset import Subset, load_subset
from common.core.config import ConfigError, read_yaml_mapping, resolve_path
from common.core.io import ArtifactError
from common.pipeline.graph import BENCHMARKS

DEFAULT_PATH = "configs/experiments.yaml"
MAIN_CONFIGS = {name: config for name, config in BENCHMARKS.values()}  # the one list: common.pipeline.graph
ALL = "all"  # subset tag meaning "every question of the main config"


@dataclass(frozen=True)
class Variant:
    """One run that differs from the main config by ``set`` only."""

    name: str
    label: str
    set: dict[str, Any] = field(default_factory=dict)

    def overrides(self) -> list[str]:
        """``--set`` strings; values are YAML-dumped so lists and numbers round-trip."""
        return [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
                for k, v in self.set.items()]


@dataclass
class Experiments:
    main_run: str
    judges: dict[str, str]
    baselines: list[Variant]
    variants: list[Variant]
    subsets: dict[str, Optional[str]]
    panels: dict[str, list[str]]
    source: Path

    # ---------------------------------------------------------------- names
    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ConfigError(f"{self.source}: ablations.variants has no variant {name!r}")

    def baseline(self, name: str) -> Variant:
        for v in self.baselines:
            if v.name == name:
                return v
        raise ConfigError(f"{self.source}: baselines has no entry {name!r}")

    def subset(self, benchmark: str, choice: Optional[str] = None) -> Optional[Subset]:
        """The subset to use: ``choice`` (a path, or ``all``) else the configured default.

        ``None`` means every question of the main config.
        """
        path = choice if choice is not None else self.subsets.get(benchmark)
        if path in (None, "", ALL):
            return None
        return load_subset(path)

    @staticmethod
    def baseline_run(name: str) -> str:
        return f"baseline_{name}"

    @staticmethod
    def ablation_run(variant: str, subset: Optional[Subset]) -> str:
        return f"ablation_{subset.name if subset else ALL}_{variant}"

    @staticmethod
    def run_dir(results_dir: str | Path, benchmark: str, run: str) -> Path:
        return resolve_path(str(results_dir)) / benchmark / run


def _variants(raw: Any, where: str, source: Path) -> list[Variant]:
    if not isinstance(raw, list):
        raise ConfigError(f"{source}: {where} must be a list")
    out, seen = [], set()
    for i, item in enumerate(raw):
        loc = f"{source}: {where}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConfigError(f"{loc}.name: expected a string")
        unknown = set(item) - {"name", "label", "set"}
        if unknown:
            raise ConfigError(f"{loc}: unknown key(s) {sorted(unknown)}")
        if item["name"] in seen:
            raise ConfigError(f"{loc}.name: duplicate {item['name']!r}")
        seen.add(item["name"])
        sets = item.get("set") or {}
        if not isinstance(sets, dict):
            raise ConfigError(f"{loc}.set: expected a mapping of config keys")
        out.append(Variant(item["name"], str(item.get("label", item["name"])), dict(sets)))
    return out


def load(path: str = DEFAULT_PATH) -> Experiments:
    """Read and check ``configs/experiments.yaml`` (one-line errors naming the key)."""
    source = resolve_path(path)
    data = read_yaml_mapping(source, "experiments")
    main = data.get("main") or {}
    abl = data.get("ablations") or {}
    exp = Experiments(
        main_run=str(main.get("run", "paper")),
        judges=dict(main.get("judges") or {}),
        baselines=_variants(data.get("baselines", []), "baselines", source),
        variants=_variants(abl.get("variants", []), "ablations.variants", source),
        subsets=dict(abl.get("subset") or {}),
        panels={k: list(v) for k, v in (abl.get("panels") or {}).items()},
        source=source,
    )
    if set(exp.judges) != {"primary", "secondary"}:
        raise ConfigError(f"{source}: main.judges must name exactly 'primary' and 'secondary'")
    for panel, names in exp.panels.items():
        for n in names:
            try:
                exp.variant(n)
            except ConfigError:
                raise ConfigError(f"{source}: ablations.panels.{panel}: unknown variant {n!r}") from None
    return exp


def resolve_run(value: str, benchmark: Optional[str], results: Path) -> Path:
    """A run directory from a path, or from a run name under ``results/<benchmark>/``."""
    path = Path(value)
    if path.is_dir():
        return path
    benches = [benchmark] if benchmark else list(MAIN_CONFIGS)
    found = [results / b / value for b in benches if (results / b / value).is_dir()]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ArtifactError(f"no run {value!r} under {results}/{{{','.join(benches)}}}/")
    raise ArtifactError(f"run {value!r} exists for several benchmarks; choose one with BENCH={'|'.join(MAIN_CONFIGS)}")
