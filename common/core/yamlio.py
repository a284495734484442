"""YAML reading through libyaml's C parser when PyYAML was built with it.

The same safe documents as ``yaml.safe_load``, several times faster: 09_aggregate and the report
read each run's resolved config and the price file, and a sweep of ablation variants did so
hundreds of times (a quarter of ``make ablations``' time went to the pure-Python parser).
"""
from __future__ import annotations

from typing import Any

import yaml

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, with the C parser where available; raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)
