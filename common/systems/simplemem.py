"""SimpleMem (``method.name: simplemem``): the ``simplemem`` 0.1.0 package (aiming-lab) on its embedded
LanceDB store, run in-process (it installs beside the harness's pins: ``requirements-systems.txt``),
every LLM and embedding call through the harness's gateway (``common.systems.gateway``).

What SimpleMem does with a memory, as its own LoCoMo test (``test_locomo10.py``) runs it: the
conversation's turns, numbered across sessions, each with its session's date, are added as
dialogues; its memory builder cuts them into windows of 40 and asks the LLM for "atomic entries"
(self-contained restatements with time, place, persons, entities, topic) per window, the windows
in parallel; each entry is embedded and stored in a LanceDB table with a full-text index. A question
is answered by its hybrid retriever: the LLM plans what information is needed and which queries to
run, each query is a semantic search (top 25), the results are merged, and reflection rounds (LLM)
check whether they suffice and search again. The context is its answer generator's rendering of
the entries (``[Context i]`` blocks: content, time, location, persons, entities, topic), which is
the evidence buffer here. Under ``systems.protocol: native`` SimpleMem also answers, as its test
does: its ``AnswerGenerator.generate_answer`` (its prompt, the JSON reply's ``answer``) runs in 06
through the gateway, its calls counted with the question's, and 07 takes that answer
(``Found.answer``). The test's category-5 prompt is not used (it is chosen by a benchmark label).

How it is wired: SimpleMem's ``SimpleMemSystem`` is not used (its constructor loads a
SentenceTransformer from the model hub); its parts are, with the gateway behind them: its
``LLMClient`` with the gateway's base URL and a session key (streaming off: the gateway does not
stream; SDK retries off), and an embedding model object that embeds through the gateway's
``/v1/embeddings`` (the harness's embedding model). One LanceDB directory per memory under the
memory's state directory; a search opens it again. Its windows are extracted in parallel as in
its test, their entries stored in window order (it stores them in completion order, which changes
from run to run). SimpleMem reports its failures with ``print``;
the lines that say an error or a failure are counted per memory (``printed_error``), the rest are
dropped. Its thread pools are given the harness's context, so their calls and errors reach the
memory's account.
"""
from __future__ import annotations

import concurrent.futures
import contextvars
import math
import re
import threading
import time
import types
from pathlib import Path
from typing import Any, Optional

import numpy as np

from common.core.config import Config
from common.core.llm import system_sdk_client
from common.core.schema import Question
from common.core.tokens import count_tokens
from common.method.render import MemoryView
from common.systems import outcomes
from common.systems.base import PROTOCOL_STAGES, Context, Evidence, Found, MemorySystem, Spent, render, turn_text

SIMPLEMEM_VERSION = "0.1.0"
# test_locomo10.py's system: SimpleMemSystem(clear_db=True) with the package's defaults.
DEFAULTS: dict[str, Any] = {"window_size": 40, "semantic_top_k": 25, "enable_planning": True,
                            "enable_reflection": True, "max_reflection_rounds": 2, "max_parallel_workers": 16}
TABLE = "memory_entries"
# The extraction prompt without the window's dialogues (o200k tokens), for the dry run.
EXTRACTION_PROMPT_TOKENS = 1100
_FAILED = re.compile(r"fail|error|exception", re.I)
_MODULES = ("simplemem.core.memory_builder", "simplemem.core.hybrid_retriever", "simplemem.utils.llm_client",
            "simplemem.database.vector_store", "simplemem.core.answer_generator")
_lock = threading.Lock()


def _printed(*args: Any, **kwargs: Any) -> None:
    """SimpleMem's ``print``: a line that reports an error or a failure is counted in the current
    account (the memory being ingested); the rest is its progress chatter, dropped."""
    text = " ".join(str(a) for a in args).strip()
    if text and _FAILED.search(text):
        outcomes.note_error("printed_error", text)


class _ContextPool(concurrent.futures.ThreadPoolExecutor):
    """A thread pool whose tasks run in the submitter's context (the harness's account)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


def _in_order(fs: Any, timeout: Optional[float] = None) -> list[Any]:
    """``as_completed`` for SimpleMem: the futures in submission order."""
    return list(fs)


def _import_simplemem() -> dict[str, Any]:
    """SimpleMem's modules with their ``print`` and thread pools replaced (once)."""
    import importlib

    with _lock:
        mods = {name: importlib.import_module(name) for name in _MODULES}
        futures = types.SimpleNamespace(**{n: getattr(concurrent.futures, n) for n in dir(concurrent.futures)
                                           if not n.startswith("_")})
        futures.ThreadPoolExecutor = _ContextPool
        # Results in the order the tasks were submitted (each waited for), not as they complete:
        # the windows' entries are then stored, embedded and ranked the same way on every run.
        futures.as_completed = _in_order
        for module in mods.values():
            module.print = _printed  # type: ignore[attr-defined]
            if hasattr(module, "concurrent"):
                module.concurrent = types.SimpleNamespace(futures=futures)  # type: ignore[attr-defined]
    return mods


class GatewayEmbedder:
    """SimpleMem's ``EmbeddingModel`` interface over the gateway's ``/v1/embeddings``."""

    def __init__(self, base_url: str, api_key: str, dimension: int) -> None:
        self.client = system_sdk_client(base_url, api_key)
        self.dimension = dimension
        self.model_name, self.model_type, self.supports_query_prompt = "harness", "gateway", False

    def encode(self, texts: Any, is_query: bool = False) -> np.ndarray:
        texts = [texts] if isinstance(texts, str) else list(texts)
        data = self.client.embeddings.create(model="harness", input=texts, encoding_format="float").data
        vectors = np.asarray([d.embedding for d in sorted(data, key=lambda d: d.index)], dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)  # SimpleMem normalises its embeddings

    def encode_single(self, text: str, is_query: bool = False) -> np.ndarray:
        return self.encode([text], is_query)[0]

    def encode_query(self, queries: list[str]) -> np.ndarray:
        return self.encode(queries, True)

    def encode_documents(self, documents: list[str]) -> np.ndarray:
        return self.encode(documents, False)


class SimpleMem(MemorySystem):
    name = "simplemem"
    stages = PROTOCOL_STAGES
    role = "memory"
    uses_gateway = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.opts = self.options(DEFAULTS)
        for key in ("window_size", "semantic_top_k", "max_reflection_rounds", "max_parallel_workers"):
            if not isinstance(self.opts[key], int) or self.opts[key] < 1:
                raise ValueError(f"method.options.{key}: must be a positive integer, not {self.opts[key]!r}")

    def settings(self) -> dict[str, Any]:
        own = {**self.opts, "simplemem": SIMPLEMEM_VERSION, "model": self.ctx.cfg.role("memory").model}
        # The same search under both protocols; native runs keep their own digests all the same.
        return {**own, "protocol": "native"} if self.protocol == "native" else own

    def _parts(self, db: Path, session: Any) -> dict[str, Any]:
        """SimpleMem's client, store, builder, retriever and answer generator over ``db``, every
        endpoint the gateway's (``session``: base URL and key)."""
        mods = _import_simplemem()
        from simplemem.config import SimpleMemConfig, set_config

        model = self.ctx.cfg.role("memory").model
        # Its global configuration, read by every part: nothing from the user's environment.
        set_config(SimpleMemConfig(openai_api_key="unused", openai_base_url=None, llm_model=model,
                                   embedding_model="harness", lancedb_path=str(db), use_streaming=False,
                                   window_size=int(self.opts["window_size"]),
                                   semantic_top_k=int(self.opts["semantic_top_k"])))
        llm = mods["simplemem.utils.llm_client"].LLMClient(api_key=session.api_key, model=model,
                                                           base_url=session.base_url, use_streaming=False)
        llm.client = system_sdk_client(session.base_url, session.api_key)
        embedder = GatewayEmbedder(session.base_url, session.api_key, int(self.ctx.embedder().dim))
        store = mods["simplemem.database.vector_store"].VectorStore(db_path=str(db), embedding_model=embedder,
                                                                     table_name=TABLE)
        builder = mods["simplemem.core.memory_builder"].MemoryBuilder(
            llm_client=llm, vector_store=store, window_size=int(self.opts["window_size"]),
            enable_parallel_processing=True, max_parallel_workers=int(self.opts["max_parallel_workers"]))
        retriever = mods["simplemem.core.hybrid_retriever"].HybridRetriever(
            llm_client=llm, vector_store=store, semantic_top_k=int(self.opts["semantic_top_k"]),
            enable_planning=bool(self.opts["enable_planning"]), enable_reflection=bool(self.opts["enable_reflection"]),
            max_reflection_rounds=int(self.opts["max_reflection_rounds"]),
            # Sequential searches: the parallel ones merge in completion order (not reproducible).
            enable_parallel_retrieval=False)
        answers = mods["simplemem.core.answer_generator"].AnswerGenerator(llm_client=llm)
        return {"llm": llm, "store": store, "builder": builder, "retriever": retriever, "answers": answers}

    def _gateway(self) -> Any:
        if self.ctx.gateway is None:
            raise RuntimeError("simplemem needs the harness's gateway (ctx.gateway): run it through the pipeline")
        return self.ctx.gateway

    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        from simplemem.models.memory_entry import Dialogue

        spent, started = Spent(), time.perf_counter()
        # test_locomo10.py's convert_to_dialogues: every turn in session order, numbered from 1,
        # with its session's date.
        dialogues, n = [], 0
        for s in view.sessions:
            for t in s.turns:
                n += 1
                text = turn_text(t, self.ctx.include_images)
                dialogues.append(Dialogue(dialogue_id=n, speaker=t.speaker, content=text,
                                          timestamp=s.date_time or None))
        with self._gateway().session(spent) as session:
            parts = self._parts(state_dir / "lancedb", session)
            parts["builder"].add_dialogues(dialogues)
            parts["builder"].process_remaining()  # SimpleMemSystem.finalize
            outcomes.note_items(int(parts["store"].table.count_rows()))
        self.ctx.advance(len(view.sessions))
        spent.seconds = round(time.perf_counter() - started, 4)
        return spent

    def search(self, question: Question, view: MemoryView) -> Found:
        started, spent = time.perf_counter(), Spent()
        with self._gateway().session(spent) as session:
            parts = self._parts(self.ctx.state_dir / question.memory_id / "lancedb", session)
            entries = parts["retriever"].retrieve(question.question)
            context = parts["answers"]._format_contexts(entries)
            # native: SimpleMem's own answer, as test_locomo10.py asks its answer generator for it
            answer = parts["answers"].generate_answer(question.question, entries) \
                if self.protocol == "native" else None
        evidence = [Evidence(e.lossless_restatement, [], e.timestamp or "", None, "") for e in entries]
        spent.seconds = round(time.perf_counter() - started, 4)
        return Found(evidence, spent, {"context": context, "entries": len(entries)}, answer=answer)

    def row(self, question: Question, view: MemoryView) -> Any:
        """The default row, with SimpleMem's own rendering of its entries as the buffer."""
        started = time.perf_counter()
        found = self.search(question, view)
        row = render(question, self.name, found, round(time.perf_counter() - started, 4))
        row.buffer_text = found.info["context"]
        row.buffer_tokens = count_tokens(row.buffer_text) if row.buffer_text else 0
        return row

    @classmethod
    def estimate_ingest(cls, view: MemoryView, cfg: Config) -> Optional[Spent]:
        """One extraction call per window of ``window_size`` turns, each the prompt and its turns."""
        opts = {**DEFAULTS, **cfg.method.options}
        turns = [f"[{s.date_time}] {t.speaker}: {t.text}" for s in view.sessions for t in s.turns]
        size = int(opts["window_size"])
        windows = math.ceil(len(turns) / size) if turns else 0
        prompt = sum(EXTRACTION_PROMPT_TOKENS + count_tokens("\n".join(turns[i:i + size]))
                     for i in range(0, len(turns), size))
        return Spent(calls=windows, prompt_tokens=prompt, completion_tokens=windows * 60 * size // 4)
