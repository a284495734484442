"""Shared test fixtures: offline environment, the local fake OpenAI server, run helpers."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.pipeline.graph import STAGES, by_name
from tests.fake_openai import FakeOpenAI

REPO = Path(__file__).resolve().parent.parent
REAL_LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
TINY_LOCOMO = REPO / "tests" / "fixtures" / "locomo_tiny.json"

# No test may reach a model hub; fail fast instead of hanging in retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# pytest-xdist already runs one test per core; torch's OpenMP pool of one thread per core in each
# of them (and in their stage processes) only oversubscribes the cores. The fixture runs' floats do
# not depend on it (docs/development.md, floating-point results); an explicit value still wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test``: ``-n auto --dist loadgroup``), the tests that share a
    module-scoped fixture run on one worker, so the fixture (a pipeline run, a bench, a model) is
    built once instead of once per worker; every other test goes wherever a worker is free.
    ``tryfirst``: xdist's worker turns the group marks into node ids in its own hook of this name,
    so the marks must be there before it runs (tests/test_suite_grouping.py checks the effect).

    The ``slow`` tests (the end-to-end runs, 20 s to 2 min each) come first, so that the workers
    start on them and finish together on the short ones, instead of one worker still running a
    two-minute test while the other has run out of work."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: order kept otherwise
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:  # a module that names its own group
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture
def fake_server():
    with FakeOpenAI() as server:
        yield server


def block_sockets_except(monkeypatch, base_url: str, also=None) -> list:
    """Refuse every connection and name lookup but ``base_url``'s host and port (and addresses
    ``also(address)`` accepts: e.g. the gateway's, whose port is known once it runs); returns the
    list of attempts (addresses, or refused host names) for the test to check."""
    import socket
    from urllib.parse import urlparse

    allowed = (urlparse(base_url).hostname, urlparse(base_url).port)
    attempts: list = []
    real_connect, real_lookup = socket.socket.connect, socket.getaddrinfo

    def connect(self, address):
        attempts.append(address)
        if not (isinstance(address, tuple) and ((address[0], address[1]) == allowed or (also and also(address)))):
            raise OSError(f"blocked by the test: {address}")
        return real_connect(self, address)

    def lookup(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", allowed[0]):
            attempts.append(host)
            raise socket.gaierror(f"blocked by the test: {host}")
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    return attempts


@pytest.fixture(scope="session")
def shared_embeddings(tmp_path_factory) -> str:
    """One embedding cache for the ``make`` end-to-end runs on the fixtures (per pytest-xdist worker).

    Those runs embed the same fixture texts with the same model, and a stage whose texts are all
    cached never loads the model (~10 s per process, twice per pipeline). Vectors are keyed by model
    and text, so sharing changes no artifact, only how often the model is loaded; tests that check
    the embedding counters or the model loading keep their own cache (``run_overrides``'s)."""
    return str(tmp_path_factory.getbasetemp() / "shared_embeddings.sqlite")


@pytest.fixture
def real_locomo() -> Path:
    if not REAL_LOCOMO.exists():
        pytest.skip(f"real LoCoMo file not available at {REAL_LOCOMO}")
    return REAL_LOCOMO


def needs_files(*paths: Path, why: str) -> pytest.MarkDecorator:
    """Skip a test that reads real data from beside the checkout (``../shared/data``, never
    committed) when one of ``paths`` is absent, naming the first missing one. Only absence skips:
    a file that is there but unreadable or malformed still fails the test that reads it."""
    missing = [p for p in paths if not p.exists()]
    return pytest.mark.skipif(bool(missing), reason=f"{missing[0]} not found: {why}" if missing else why)


def fake_vectors(base_url: str) -> dict[str, str]:
    """Config overrides that take every vector from the fake server's /v1/embeddings: for the
    end-to-end tests whose subject is not the embeddings, so that no process of theirs imports and
    loads the CPU model."""
    return {"embedding.backend": "openai", "embedding.model": "fake-embed", "embedding.base_url": base_url}


def run_overrides(tmp_path: Path, data: Path, **extra: object) -> list[str]:
    """Config overrides that keep a test run's artifacts and caches inside tmp_path."""
    sets = {
        "data.path": str(data),
        "run.results_dir": str(tmp_path / "results"),
        "run.name": "t",
        "llm.cache_path": str(tmp_path / "llm.sqlite"),
        "embedding.cache_path": str(tmp_path / "emb.sqlite"),
        "llm.initial_wait": 0.01,
        "llm.max_wait": 0.05,
        "llm.concurrency": 4,
        **extra,
    }
    return [f"{k}={v}" for k, v in sets.items()]


def make_client(server, tmp_path: Path, role: str, *, max_attempts: int = 2):
    """An LLMClient with one role pointed at the fake server, fast retries and a private cache."""
    from common.core.llm import LLMClient, ResponseCache, RetryPolicy, RoleSettings

    return LLMClient(
        {role: RoleSettings(role=role, model="m", base_url=server.base_url, timeout=2.0)},
        cache=ResponseCache(str(tmp_path / "c.sqlite")),
        retry=RetryPolicy(max_attempts=max_attempts, initial_wait=0.01, max_wait=0.02),
    )


# The stage names in graph order (``common.pipeline.graph``), the single declaration of the pipeline.
STAGE_ORDER = [s.name for s in STAGES]

# A short two-speaker session shared by the partition and extraction unit tests.
DIALOGUE = [
    ("Caroline", "I went to the LGBTQ support group yesterday and it was powerful."),
    ("Melanie", "That sounds wonderful! What happened at the meeting?"),
    ("Caroline", "People shared transgender stories, very inspiring experiences."),
    ("Melanie", "I painted a sunrise over the lake last weekend."),
    ("Caroline", "Beautiful! Painting seems relaxing for you."),
    ("Melanie", "It is. Running also helps me unwind."),
]


def rows(path: Path) -> list[dict]:
    """Every row of a JSONL artifact."""
    import json

    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_stages(config: str, sets: list[str], stages: list[str] = STAGE_ORDER):
    """Run pipeline stages in-process on ``config`` plus ``--set`` overrides; return the Run."""
    from common.core.config import load_config
    from common.pipeline.engine import Run

    run = Run(load_config([config], sets), progress=False)
    for stage in stages:
        by_name(stage).resolve()(run)
    return run


def through_the_gateway(mp, fake_base_url: str) -> tuple[list, list[int]]:
    """Sockets refused but the fake server's and those of the gateways the stages start; returns
    the connection attempts and the gateways' ports."""
    from common.systems.gateway import Gateway  # aiohttp: only for the tests that start a gateway

    ports: list[int] = []
    start = Gateway.start

    def started(self):
        out = start(self)
        ports.append(self.port)
        return out

    mp.setattr(Gateway, "start", started)
    attempts = block_sockets_except(mp, fake_base_url, also=lambda a: a[0] == "127.0.0.1" and a[1] in ports)
    return attempts, ports
