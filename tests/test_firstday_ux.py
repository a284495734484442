"""A new user's first day: runs say what ran and what they did, stops say why, commands run as shown."""
from __future__ import annotations

from common.core.config import load_config


# ----------------------------------------------------------------------------- the method that ran
def test_method_label_names_systems_and_user_classes():
    from common.evaluation.scoring import method_label

    for name, want in (("mem0", "mem0 (this harness, run m0)"), ("amem", "A-MEM (this harness, run m0)"),
                       ("ensimem", "EnSIMem (this harness, run m0)")):
        cfg = load_config(["configs/locomo.yaml"], [f"method.name={name}", "run.name=m0"])
        assert method_label(cfg) == want
    lme = load_config(["configs/longmemeval.yaml"], ["method.name=my.pkg:Mine", "run.name=x"])
    assert method_label(lme) == "my.pkg:Mine (this harness, run x)"
