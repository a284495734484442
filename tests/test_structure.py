"""Structural rules of the code base that a refactor must not break."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from common.core.config import EmbeddingConfig
from common.core.embeddings import Embedder
from tests.conftest import REPO

STAGE_SCRIPTS = ["01_preprocess", "02_episodes", "03_extract", "04_index", "05_plan", "06_retrieve",
                 "07_answer", "08_judge", "09_aggregate"]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_llm_module_imports_openai():
    offenders = [str(p.relative_to(REPO)) for d in ("common", "LoCoMo", "LongMemEval", "BEAM", "LoCoMoPlus")
                 for p in (REPO / d).rglob("*.py") if "openai" in _imports(p) and p.name != "llm.py"]
    assert offenders == []


def test_numbered_scripts_are_thin_and_complete():
    for name in STAGE_SCRIPTS:
        path = REPO / "LoCoMo" / f"{name}.py"
        assert path.exists(), path
        assert len(path.read_text().splitlines()) <= 20
        assert _imports(path) <= {"common"}


def test_openai_embedding_backend_through_a_local_endpoint(fake_server, tmp_path):
    cfg = EmbeddingConfig(backend="openai", model="fake-embed", base_url=fake_server.base_url,
                          cache_path=str(tmp_path / "emb.sqlite"))
    emb = Embedder.from_config(cfg)
    vecs = emb.encode(["a turtle at the aquarium", "a turtle at the aquarium", "half marathon"])
    assert vecs.shape[0] == 3 and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vecs[0], vecs[1])
    before = fake_server.request_count
    emb.encode(["half marathon"])
    assert fake_server.request_count == before  # served from the embedding cache
