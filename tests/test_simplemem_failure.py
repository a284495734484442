"""The SimpleMem case, reproduced with the real package: an endpoint whose reply to SimpleMem's planning
prompt lacks ``required_info`` makes SimpleMem's own ``hybrid_retriever.retrieve`` raise KeyError.
It once stopped ``make locomo`` in 06 with a 60-line traceback; now each such question is a counted
failure (``system_error``), 07 does not answer it, the stage says what happened in one line when too
many fail, and a run allowed to go on finishes with them counted. Importing SimpleMem (LanceDB,
pandas) takes 20 s here: make test-slow runs it."""
from __future__ import annotations

import importlib.util
import json

import pytest

from common.pipeline.engine import StageFailed
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages
from tests.fake_openai import scripted

pytestmark = [pytest.mark.systems,
              pytest.mark.skipif(importlib.util.find_spec("simplemem") is None,
                                 reason="simplemem not installed (make install installs requirements-systems.txt)")]
PLANNING = "determine what specific information is required to answer it"  # SimpleMem's planning prompt


def without_required_info(text: str) -> dict:
    """A model's plan that answers the prompt's first two fields and leaves out ``required_info``."""
    return {"question_type": "factual", "key_entities": ["Nadia"]}


def test_simplemem_raising_in_search_is_counted_and_the_run_goes_on(tmp_path, monkeypatch):
    from tests.fake_openai import FakeOpenAI

    monkeypatch.setattr(scripted, "TEXT_KINDS", [(PLANNING, without_required_info), *scripted.TEXT_KINDS])
    with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{
            "method.name": "simplemem", "embedding.backend": "openai", "embedding.model": "fake-embed",
            "embedding.base_url": fake.base_url, "data.memories": "[tiny-1]"})
        with pytest.raises(StageFailed) as err:  # every search raised: over run.max_error_rate, in one line
            run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve"])
        message = str(err.value)
        assert "\n" not in message and "most failed with system_error" in message and "KeyError" in message
        # allowed to go on, the run finishes: every question a counted failure, none answered from nothing
        run = run_stages("configs/locomo.yaml", sets + ["run.max_error_rate=1.0"])
    got = rows(run.path("retrievals"))
    assert got and all(r["error"] == "system_error: KeyError: 'required_info'" for r in got)
    assert all("hybrid_retriever.py" in r["method_info"]["traceback"] for r in got)
    assert all(a["answer"] is None and a["error"].startswith("retrieval_failed") for a in rows(run.path("answers")))
    metrics = json.loads(run.path("metrics").read_text())
    scored = metrics["judges"]["gpt-4o-mini"]
    assert scored["failures"] == {"retrieval_failed": scored["overall"]["n"]}
    assert metrics["memory_system"]["search_failed"] == {"system_error": len(got)}
    assert metrics["memory_system"]["outcomes"].get("empty_memory") is None  # its memory was built
