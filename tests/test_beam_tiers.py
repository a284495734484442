"""BEAM's big tiers: a 1M-shaped tier folder (real 100K chats under the 1M tier's name and file-list
format, chat files listed by git blob id) checked as official and run 01-09 through the fake server."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from common.benchmarks import beam, beam_data, checksums
from common.core import embeddings as emb
from common.core.config import load_config
from common.method.index import EMBEDDED_FIELDS, build_index
from tests.conftest import STAGE_ORDER as ORDER
from tests.conftest import fake_vectors, rows, run_overrides, run_stages
from tests.test_beam import TIER, tiny_tier
from tests.test_retrieve import EPISODES, RECORDS, VIEW
from tests.test_tokens_embeddings import CountingBackend

pytestmark = pytest.mark.skipif(not TIER.exists(), reason=f"shared BEAM data not at {TIER}")


def one_m_tier(root: Path, monkeypatch: pytest.MonkeyPatch, chats: tuple[str, ...] = ("1",)) -> Path:
    """Real 100K chats (shortened) in a folder named 1M, and a digest list in the 1M file's format
    (each chat file by its git blob id, each question file by its sha256) that the check reads."""
    folder = tiny_tier(root, chats=chats, groups=1).rename(root / "1M")
    lines = ["# a 1M-shaped list: chat files by git blob id, question files by sha256"]
    for d in beam.chat_dirs(folder):
        chat = beam.chat_file(d)
        data = chat.read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        lines.append(f"{blob}  1M/{d.name}/{chat.name}")
        sha = hashlib.sha256((d / beam.QUESTIONS_FILE).read_bytes()).hexdigest()
        lines.append(f"{sha}  1M/{d.name}/{beam.QUESTIONS_FILE.as_posix()}")
    sums = root / "sums"
    sums.mkdir()
    (sums / "1M.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(beam_data, "SUMS_DIR", str(sums))
    return folder


def test_a_1m_tier_listed_by_git_blob_id_is_the_official_release_and_a_changed_chat_is_not(tmp_path, monkeypatch):
    folder = one_m_tier(tmp_path, monkeypatch, chats=("1", "2"))
    expected = beam.official_files("1M")
    assert sorted(len(d) for d in expected.values()) == [40, 40, 64, 64]
    read = [f.relative_to(folder).as_posix() for f in beam.data_files(folder)]
    got = checksums.check(expected, folder, folder=True, read=read)
    assert got["status"] == "official", got.get("warning")
    chat = beam.chat_file(folder / "2")
    chat.write_bytes(chat.read_bytes().replace(b"}", b" }", 1))
    got = checksums.check(expected, folder, folder=True, read=read)
    assert got["status"] == "modified"
    assert f"2/{chat.name} git blob id" in got["warning"] and "differs from the official release's" in got["warning"]
    # A missing chat of a 1M download is named with the kind of digest its list gives.
    chat.unlink()
    got = checksums.check(expected, folder, folder=True, read=read[:2])
    assert f"1 of the official release's 4 files missing (first: 2/{chat.name}, git blob id " in got["warning"]


def test_data_tier_accepts_every_tier_make_data_beam_downloads():
    for size in beam_data.TIERS:
        assert load_config(["configs/beam.yaml"], [f"data.tier={size}"]).data.tier == size
    with pytest.raises(Exception, match="data.tier"):
        load_config(["configs/beam.yaml"], ["data.tier=2M"])


@pytest.mark.slow  # an end-to-end run: about 4 s once the stages' imports are warm
def test_beam_1m_runs_01_to_09_through_the_fake_server_and_is_official(tmp_path, fake_server, monkeypatch):
    """What ``make beam SIZE=1M`` runs (data.tier=1M), on a 1M-shaped folder: memories named by the
    tier, every stage's artifact, and metrics.json says the dataset is the official release."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    folder = one_m_tier(tmp_path, monkeypatch)
    sets = run_overrides(tmp_path, folder, **fake_vectors(fake_server.base_url),
                         **{"data.tier": "1M", "data.question_limit": 2})
    run = run_stages("configs/beam.yaml", sets, ORDER)
    answers = rows(run.path("answers"))
    # LIMIT draws its questions across abilities (seeded): the ones 01 selected, each answered once.
    selected = [q["qid"] for q in rows(run.path("questions"))]
    assert len(selected) == 2 and all(q.startswith("beam-1M-1:q") for q in selected)
    assert [a["qid"] for a in answers] == selected
    metrics = json.loads((run.dir / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["dataset"]["status"] == "official", metrics["dataset"].get("warning")


# ----------------------------------------------------------------------------- bounded index build
class WideBackend(CountingBackend):
    """Wide vectors, so that the index's arrays (not Python objects) dominate its memory."""

    model_id = "fake:wide"
    dim = 4096


def _index_peak(encode_chunk: int) -> tuple[int, Any, int]:
    """The index build's traced peak (bytes above the start), the index, and its output bytes."""
    import tracemalloc

    backend = WideBackend()
    embedder = emb.Embedder(backend, cache_path="")  # no cache: only the build's own arrays
    tracemalloc.start()
    try:
        idx = build_index(VIEW, EPISODES, RECORDS, embedder, encode_chunk=encode_chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = idx.chunk_vecs.nbytes + sum(v.nbytes for v in idx.field_vecs.values())
    return peak, (idx, backend), out


def test_index_build_streams_slices_and_holds_the_output_plus_one_slice_not_the_matrix_twice():
    whole_peak, (whole, _), out = _index_peak(encode_chunk=10**6)
    peak, (streamed, backend), _ = _index_peak(encode_chunk=4)
    slice_bytes = 4 * WideBackend.dim * 4  # 4 float32 rows, plus the embedder's copies of them
    assert len(backend.calls) > 5 and max(len(c) for c in backend.calls) <= 4
    # The same vectors, float32, row for row, whatever the slicing.
    assert streamed.chunk_vecs.dtype == np.float32
    np.testing.assert_array_equal(whole.chunk_vecs, streamed.chunk_vecs)
    for f in EMBEDDED_FIELDS:
        np.testing.assert_array_equal(whole.field_vecs[f], streamed.field_vecs[f])
    # Streamed: the output once plus a few copies of one slice. In one slice the embedder's and the
    # builder's copies of the whole matrix are alive together (at least twice the output).
    assert peak < out + 8 * slice_bytes + 64 * 1024, (peak, out)
    assert whole_peak > 2 * out


# ----------------------------------------------------------------------------- the generated big chat
def test_generated_chat_reaches_its_tokens_from_real_batches_with_distinct_texts_and_loads(tmp_path):
    from bench import beam_scale
    from common.core.tokens import count_tokens

    source = beam_scale._source_batches(TIER)
    tokens = 30_000
    gen = beam_scale.generate(TIER, tmp_path / "10M", tokens)
    chat = json.loads(Path(gen["path"]).read_text(encoding="utf-8"))
    assert gen["batches"] == len(chat) and [b["batch_number"] for b in chat] == list(range(1, len(chat) + 1))
    texts = [m["content"] for b in chat for g in b["turns"] for m in g]
    assert sum(count_tokens(t) for t in texts) >= tokens  # the target reached, with whole batches
    assert sum(count_tokens(m["content"]) for b in chat[:-1] for g in b["turns"] for m in g) < tokens
    assert chat[0]["turns"][0][0]["content"] == source[0]["turns"][0][0]["content"]  # real messages
    ids = [m["id"] for b in chat for g in b["turns"] for m in g]
    assert ids == list(range(len(ids)))  # renumbered over the whole chat
    data = beam.load_beam(tmp_path / "10M")
    assert data.memory_ids == ["beam-10M-1"] and len(data.questions) == 20
    # A second pass marks its messages: no text repeats, so the embedding cache saves nothing.
    one_pass = sum(count_tokens(m["content"]) for b in source[:2] for g in b["turns"] for m in g)
    small = [source[0], source[1]]
    again = list(beam_scale._batches(small, 2 * one_pass + 1))
    repeated = [m["content"] for b in again for g in b["turns"] for m in g]
    assert len(again) > 2 and len(set(repeated)) == len(repeated)
    assert repeated[-1].endswith(" [pass 2]") or repeated[-1].endswith(" [pass 3]")


def test_bench_beam_10m_is_a_make_target():
    import subprocess
    import sys

    from tests.conftest import REPO

    out = subprocess.run(["make", "-n", "bench-beam-10m", f"PY={sys.executable}"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "-m bench.beam_scale --tokens 10000000" in out.stdout
