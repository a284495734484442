"""A memory system in its own environment and process (common.systems.process), through the fake
server: a standard-library adapter (tests/fixtures/systems/stdlib_turns) in a venv made without pip,
every call through the gateway and in the ledger, resume with 0 calls, a crashed, hung or garbled
child counted with its cause and reaped, the child's sockets other than the gateway's refused; and
every call and outcome of a system counted whichever door it used (ctx.llm, logged errors, empty
memories and buffers), the systems table's buffer sizes and the parity cap."""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

from common.core.config import ConfigError, load_config
from common.core.schema import Question
from common.method.render import MemoryView
from common.pipeline import ledger
from common.systems import envs
from common.systems.base import Evidence, Found, MemorySystem, Spent
from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides, run_stages, through_the_gateway

FIXTURES = REPO / "tests" / "fixtures" / "systems"
STAGES = ["preprocess", "episodes", "extract", "index", "plan", "retrieve", "answer", "judge", "aggregate"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose (reaped by its parent, which is us: waitpid was called)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def child_env(tmp_path_factory):
    """The tests' systems folder, their environments in a temporary folder, the socket guard as
    the child's sitecustomize, and every child process started recorded."""
    from common.systems import process

    tmp = tmp_path_factory.mktemp("sysproc")
    guard = tmp / "guard"
    guard.mkdir()
    shutil.copy(FIXTURES / "socket_guard.py", guard / "sitecustomize.py")
    pids: list[int] = []
    start = process.Child.__init__

    def recorded(self, *args, **kwargs):
        start(self, *args, **kwargs)
        pids.append(self.proc.pid)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_SYSTEMS_ROOT", str(FIXTURES))
        mp.setenv("HARNESS_SYSTEMS_ENVS", str(tmp / "envs"))
        extra = {"PYTHONPATH": str(guard), "SOCKET_GUARD_LOG": str(tmp / "guard.log")}
        mp.setattr(process, "CHILD_ENV", extra)
        mp.setattr(process.Child, "__init__", recorded)
        yield {"tmp": tmp, "pids": pids, "guard_log": tmp / "guard.log", "child_env": extra}


def sets_for(tmp: Path, base_url: str, **extra) -> list[str]:
    return run_overrides(tmp, TINY_LOCOMO, **{"method.name": "stdlib_turns", "embedding.backend": "openai",
                                              "embedding.model": "fake-embed", "embedding.base_url": base_url,
                                              **extra})


@pytest.fixture(scope="module")
def process_run(child_env):
    """01-09 with the adapter in its own process, then 06 again (resume), every socket of the
    harness but the fake server's and the gateway's refused, the child's by its sitecustomize."""
    from tests.fake_openai import FakeOpenAI

    tmp = child_env["tmp"] / "run"
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        mp.setenv("OPENAI_API_KEY", "the-users-real-key")  # must not reach the child
        attempts, ports = through_the_gateway(mp, fake.base_url)
        # The probe: a free port on this machine that nobody may reach from the child.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            probe = f"127.0.0.1:{s.getsockname()[1]}"
        # tiny-2's ingestion logs an error and stores nothing: an empty memory, empty buffers.
        sets = sets_for(tmp, fake.base_url, **{"method.options": json.dumps({"probe": probe, "empty": ["tiny-2"]})})
        run = run_stages("configs/locomo.yaml", sets, STAGES)
        kinds, first = fake.counts_by_kind(), fake.request_count
        manifest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())
        run_stages("configs/locomo.yaml", sets, ["retrieve"])
        again = fake.request_count - first
    yield {"run": run, "kinds": kinds, "again": again, "manifest": manifest, "probe": probe, "attempts": attempts,
           **child_env}


def test_a_system_in_its_own_process_runs_through_the_gateway(process_run):
    run, kinds = process_run["run"], process_run["kinds"]
    sessions = rows(run.path("sessions"))
    judged = len(rows(run.dir / "08_judge_gpt-4o-mini.jsonl"))
    # One note per session (through the gateway), then the answers and judgments; turns and
    # questions embedded through the gateway too.
    assert kinds == {"generic": len(sessions), "answer": 11, "judge_locomo": judged, "embeddings": kinds["embeddings"]}
    assert kinds["embeddings"] >= len(sessions) + 6  # each session, each question of tiny-1 (tiny-2 is empty)
    led = ledger.ledger(run.dir)
    by = {(e["stage"], e["role"]): e for e in led["stages"]}
    assert by[("06_retrieve_ingest", "memory")]["calls"] == len(sessions)
    assert led["total"]["calls"] == len(sessions) + 11 + judged == sum(v for k, v in kinds.items() if k != "embeddings")
    assert ("06_retrieve", "bridge") not in by and by[("06_retrieve", "memory")]["calls"] == 0
    for r in rows(run.path("retrievals")):
        assert r["mode"] == "stdlib_turns" and not r["error"]
        if r["memory_id"] == "tiny-2":  # the empty memory
            assert r["method_info"]["evidence"] == [] and r["buffer_text"] == ""
            continue
        ev = r["method_info"]["evidence"]
        assert ev and all(e["dia_ids"] for e in ev) and r["dia_ids"]
        # the buffer is the system's own rendering
        assert r["buffer_text"].startswith("[") and r["buffer_tokens"] > 0
    assert process_run["again"] == 0  # the rerun: every memory and row resumed, no child asked anything
    manifest = process_run["manifest"]
    assert manifest["process"]["system"] == "stdlib_turns" and manifest["process"]["version"] == "0.1"


def test_the_child_sees_only_the_gateway(process_run):
    run = process_run["run"]
    marker = json.loads((run.dir / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").read_text())
    errors = marker["outcome"]["error_samples"]
    # The child's own socket to the probe port was refused by its guard, and counted as the
    # system's reported error; the guard logged the attempt.
    assert any(process_run["probe"] in e and "not the gateway" in e for e in errors)
    assert process_run["probe"] in process_run["guard_log"].read_text()
    assert marker["outcome"]["errors"] == {"system_error": 1} and marker["outcome"]["items"] > 0


def test_every_child_is_reaped(process_run):
    assert process_run["pids"] and not [p for p in process_run["pids"] if alive(p)]


def test_the_child_gets_no_secret_of_the_user(child_env):
    from common.systems import process

    seen = {}

    def spy(self, argv, env, *args, **kwargs):
        seen.update(env)
        raise RuntimeError("stop here")

    cfg = load_config(["configs/locomo.yaml"], ["method.name=stdlib_turns"])
    from common.systems.base import Context

    class Gw:
        def session(self, spent):
            import contextlib

            from common.systems.gateway import Session

            return contextlib.nullcontext(Session("http://127.0.0.1:9/v1", "per-run-token", spent))

    class Emb:
        dim = 8

    ctx = Context(cfg, child_env["tmp"], child_env["tmp"] / "state", lambda: Emb(), None, None, gateway=Gw())
    system = process.process_class("stdlib_turns")(ctx)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "sk-the-users-own")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "x")
        mp.setattr(process.Child, "__init__", spy)
        with pytest.raises(RuntimeError, match="stop here"):
            system.ingest(MemoryView("m", []), child_env["tmp"] / "state" / "m")
    assert seen["OPENAI_API_KEY"] == seen["HARNESS_GATEWAY_TOKEN"] == "per-run-token"
    assert seen["OPENAI_BASE_URL"] == "http://127.0.0.1:9/v1" and seen["HARNESS_GATEWAY_URL"] == "http://127.0.0.1:9"
    assert seen["HARNESS_EMBED_DIM"] == "8" and seen["HARNESS_SYSTEM_DIR"].endswith("/m/store")
    assert "AWS_SECRET_ACCESS_KEY" not in seen and "sk-the-users-own" not in seen.values()
    # tiktoken would download its BPE files: the child reads the harness's cache instead
    from common.core.tokens import tiktoken_cache_dir

    assert seen["TIKTOKEN_CACHE_DIR"] == str(tiktoken_cache_dir())


def test_a_failing_search_child_is_a_counted_failure_reaped_and_redone(child_env):
    """Searches whose child crashes, hangs, prints garbage or a reply of the wrong shape: the rows
    fail with that cause (the ledger counts them), the child is killed, the run does not hang;
    each next run redoes the failed rows, and the one without the fault succeeds."""
    from tests.fake_openai import FakeOpenAI

    tmp = child_env["tmp"] / "search-faults"
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        sets = sets_for(tmp, fake.base_url, **{"systems.child_timeout": 0.5, "run.max_error_rate": 1.0,
                                               "data.question_limit": 1, "data.memories": "[tiny-1]"})
        run_stages("configs/locomo.yaml", sets, ["preprocess"])
        for mode, cause in [("crash", "child_crash"), ("hang", "child_timeout"), ("bad", "child_bad_output"),
                            ("shape", "child_bad_output"), ("", "")]:
            mp.setitem(child_env["child_env"], "STDLIB_TURNS_FAIL", f"search:{mode}")
            before = set(child_env["pids"])
            run = run_stages("configs/locomo.yaml", sets, ["retrieve"])
            got = rows(run.path("retrievals"))
            assert len(got) == 1 and all(r["error"].startswith(cause) and r["fallback_used"] == bool(cause)
                                         for r in got), mode
            entry = next(e for e in ledger.ledger(run.dir)["stages"] if e["stage"] == "06_retrieve")
            assert entry["role"] == "memory" and entry["failed_rows"] == ({cause: 1} if cause else {})
            started = set(child_env["pids"]) - before
            assert started and not [p for p in started if alive(p)]
        assert all(r["method_info"]["evidence"] for r in got)


def test_a_failing_ingestion_is_counted_and_redone(child_env):
    from tests.fake_openai import FakeOpenAI

    tmp = child_env["tmp"] / "ingest-crash"
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        sets = sets_for(tmp, fake.base_url, **{"data.question_limit": 1, "data.memories": "[tiny-1]"})
        mp.setitem(child_env["child_env"], "STDLIB_TURNS_FAIL", "ingest:crash")
        with pytest.raises(Exception, match="child_crash"):
            run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve"])
        memory = tmp / "results" / "locomo" / "t" / "06_retrieve" / "memory"
        failed = json.loads((memory / "tiny-1" / "failed.json").read_text())
        assert failed["cause"] == "child_crash" and "exit 3" in failed["error"]
        assert not (memory / "tiny-1" / "ingested.json").exists()
        # the next run, the fault gone: the memory ingested again, its failure file gone with its old state
        mp.setitem(child_env["child_env"], "STDLIB_TURNS_FAIL", "")
        run = run_stages("configs/locomo.yaml", sets, ["retrieve"])
        assert not (memory / "tiny-1" / "failed.json").exists()
        assert (memory / "tiny-1" / "ingested.json").exists() and len(rows(run.path("retrievals"))) == 1


def test_empty_memory_and_logged_errors_are_counted_outcomes(process_run):
    """tiny-2's child logged an ERROR line and stored nothing: its marker counts both, 09's failure
    summary and metrics name them (never "failures: none"), the systems table shows them beside
    the evidence items and buffer tokens per question."""
    from common.evaluation.scoring import score_note
    from common.report.tables import command

    run = process_run["run"]
    marker = json.loads((run.dir / "06_retrieve" / "memory" / "tiny-2" / "ingested.json").read_text())
    assert marker["outcome"]["items"] == 0 and marker["outcome"]["errors"] == {"logged_error": 1, "system_error": 1}
    metrics = json.loads(run.path("metrics").read_text())
    block = metrics["memory_system"]
    empty = sum(1 for r in rows(run.path("retrievals")) if r["memory_id"] == "tiny-2")
    assert block["outcomes"] == {"empty_memory": 1, "empty_buffer": empty}
    assert block["ingest_errors"] == {"logged_error": 1, "system_error": 2}
    assert block["evidence_items"]["mean"] == round(10 * (11 - empty) / 11, 2) and block["evidence_items"]["p95"] == 10
    note = score_note(metrics, next(iter(metrics["judges"])))
    assert "failures: none" not in note
    assert (f"memory system: empty_memory 1 of 2, empty_buffer {empty} of 11, ingest logged_error 1, "
            f"ingest system_error 2") in note
    results = run.dir.parent.parent
    assert command.main(["--results", str(results), "--out", str(results / "tables"), "--only", "systems"]) == 0
    table = (results / "tables" / "systems.md").read_text()
    head = next(x for x in table.splitlines() if x.startswith("| Ref"))
    line = next(x for x in table.splitlines() if " | stdlib_turns | " in x)
    cells = dict(zip([c.strip() for c in head.split("|")], [c.strip() for c in line.split("|")]))
    assert cells["Items / q (mean / p95)"] == f"{block['evidence_items']['mean']:.1f} / 10.0"
    mean, p95 = (float(x.replace(",", "")) for x in cells["Buffer tokens / q (mean / p95)"].split(" / "))
    assert mean == round(block["buffer_tokens"]["mean"]) and p95 == round(block["buffer_tokens"]["p95"])
    assert f"empty_memory 1 of 2, empty_buffer {empty} of 11" in cells["Outcomes"]
    # the run's HTML report lists them too
    from common.report import html

    page = html.build(run.dir, out=process_run["tmp"] / "report.html").read_text()
    outcomes_table = page.split('id="system-outcomes"', 1)[1].split("</table>", 1)[0]
    assert 'data-outcome="empty_memory"><td>empty_memory</td><td class="count">1 of 2' in outcomes_table
    assert f'data-outcome="empty_buffer"><td>empty_buffer</td><td class="count">{empty} of 11' in outcomes_table
    assert 'data-outcome="ingest logged_error"' in outcomes_table


# ---------------------------------------------------------------------------- any door
PROMPT = "gateway.llm_user"  # the fake server answers a gateway.* prompt id generically


class LLMUser(MemorySystem):
    """A system as docs/memory-systems.md suggests: it calls ctx.llm and says Spent(calls=1), with
    no call record of its own; it also logs an ERROR from a thread of its own while ingesting."""

    role = "memory"

    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        self.ctx.llm.complete("memory", [{"role": "user", "content": f"note {view.memory_id}"}], prompt_id=PROMPT)

        def worker() -> None:
            logging.getLogger("some.library").error("extraction failed for %s", view.memory_id)

        import contextvars

        t = threading.Thread(target=contextvars.copy_context().run, args=(worker,))
        t.start()
        t.join()
        return Spent(calls=1)

    def search(self, question: Question, view: MemoryView) -> Found:
        self.ctx.llm.complete("memory", [{"role": "user", "content": question.question}], prompt_id=PROMPT)
        return Found([Evidence(f"evidence for {question.qid}", ["D1:1"])], Spent(calls=1))


def test_calls_through_ctx_llm_reach_the_ledger_under_the_systems_role(tmp_path):
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        logging.getLogger("some.library").setLevel(logging.CRITICAL)  # a library that silences itself
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "tests.test_process_systems:LLMUser"})
        run = run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve"])
        paid = fake.request_count
    by = {(e["stage"], e["role"]): e for e in ledger.ledger(run.dir)["stages"]}
    assert by[("06_retrieve_ingest", "memory")]["calls"] == 2  # one per memory
    assert by[("06_retrieve", "memory")]["calls"] == 11  # one per question
    assert ("06_retrieve", "bridge") not in by
    assert paid == 2 + 11
    marker = json.loads((run.dir / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").read_text())
    assert marker["outcome"]["errors"] == {"logged_error": 1}
    assert "some.library: extraction failed for tiny-1" in marker["outcome"]["error_samples"][0]
    assert logging.getLogger("some.library").level == logging.CRITICAL  # restored
    assert [c["role"] for c in marker["spent"]["llm_calls"]] == ["memory"]


class LooseGatewayUser(MemorySystem):
    """A system that brings its own client and uses the gateway's run-wide key, outside any session."""

    role = "memory"
    uses_gateway = True

    def search(self, question: Question, view: MemoryView) -> Found:
        import urllib.request

        gw = self.ctx.gateway
        body = json.dumps({"model": "any", "messages": [{"role": "user", "content": question.question}]})
        req = urllib.request.Request(f"{gw.base_url}/chat/completions", data=body.encode(), method="POST",
                                     headers={"Authorization": f"Bearer {gw.api_key}",
                                              "Content-Type": "application/json"})
        text = json.loads(urllib.request.urlopen(req).read())["choices"][0]["message"]["content"]
        return Found([Evidence(text)])


def test_calls_through_the_gateways_own_key_reach_the_ledger(tmp_path):
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "tests.test_process_systems:LooseGatewayUser",
                                                       "data.memories": "[tiny-1]"})
        run = run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve"])
        paid = fake.request_count
    by = {(e["stage"], e["role"]): e for e in ledger.ledger(run.dir)["stages"]}
    assert paid == 6 and by[("06_retrieve_gateway", "memory")]["calls"] == 6


# ---------------------------------------------------------------------------- parity and the table
def test_the_parity_cap_keeps_each_systems_own_ranking(process_run):
    from common.core import fingerprint
    from tests.fake_openai import FakeOpenAI

    free = process_run["run"]
    tmp = process_run["tmp"] / "parity"
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        options = json.dumps({"probe": process_run["probe"], "empty": ["tiny-2"]})
        capped = run_stages("configs/locomo.yaml", sets_for(tmp, fake.base_url, **{
            "systems.buffer_tokens": 30, "method.options": options}), ["preprocess", "retrieve"])
    a = {r["qid"]: r for r in rows(free.path("retrievals"))}
    cut = 0
    for r in rows(capped.path("retrievals")):
        assert r["buffer_tokens"] <= 30
        whole = a[r["qid"]]["method_info"]["evidence"]
        kept = r["method_info"]["evidence"]
        assert kept == whole[: len(kept)]  # the system's first items, in its order
        if whole:
            assert 0 < len(kept) < len(whole) and r["method_info"]["parity"]["items_kept"] == len(kept)
            cut += 1
    assert cut == sum(1 for r in a.values() if r["method_info"]["evidence"]) > 0
    fa, fb = fingerprint.stored(free.dir, "run"), fingerprint.stored(capped.dir, "run")
    assert fa and fb and fa != fb


def test_a_cut_buffer_without_evidence_list_is_cut_at_the_budget():
    from common.core.schema import RetrievalRow
    from common.core.tokens import count_tokens
    from common.systems.base import cap_buffer

    text = "word " * 200
    row = RetrievalRow("q", "m", "?", "ensimem", "", "", [], [], [], {}, text, count_tokens(text))
    out = cap_buffer(row, 25)
    assert out.buffer_tokens <= 25 and text.startswith(out.buffer_text) and out.method_info["parity"]["cut"]


# ---------------------------------------------------------------------------- environments
def test_system_env_is_built_once_and_stamped(tmp_path, monkeypatch):
    root = tmp_path / "systems"
    (root / "mini").mkdir(parents=True)
    (root / "mini" / "adapter.py").write_text("print('hi')\n")
    (root / "mini" / "requirements.txt").write_text("# nothing\n")
    monkeypatch.setenv("HARNESS_SYSTEMS_ROOT", str(root))
    monkeypatch.setenv("HARNESS_SYSTEMS_ENVS", str(tmp_path / "envs"))
    python = envs.build("mini", quiet=True)
    assert python.exists() and envs.ready("mini")
    stamp = python.parent.parent / envs.STAMP
    made = stamp.stat().st_mtime_ns
    assert envs.build("mini", quiet=True) == python and stamp.stat().st_mtime_ns == made  # not rebuilt
    (root / "mini" / "requirements.txt").write_text("# changed\n")
    assert not envs.ready("mini")
    (root / "mini" / "requirements.txt").write_text("requests>=2\n")
    with pytest.raises(envs.SystemEnvError, match=r"requirements.txt:1: 'requests>=2' is not an exact pin"):
        envs.build("mini", quiet=True)
    with pytest.raises(envs.SystemEnvError, match="no .*nosuch/adapter.py"):
        envs.build("nosuch", quiet=True)
    log = "ERROR: Could not find a version that satisfies the requirement simplemem==9.9 (from versions: 0.1.0)\n" \
          "ERROR: No matching distribution found for simplemem==9.9\n"
    assert envs.failed_package(log) == "simplemem==9.9"


def test_pip_args_reach_pip_and_the_stamp(tmp_path, monkeypatch):
    """``systems/<name>/pip-args.txt`` is passed to pip before the requirements, and changing it
    (like changing the pins or the interpreter) makes the environment out of date."""
    root = tmp_path / "systems"
    (root / "mini").mkdir(parents=True)
    (root / "mini" / "adapter.py").write_text("")
    (root / "mini" / "requirements.txt").write_text("somepkg==1.0\n")
    monkeypatch.setenv("HARNESS_SYSTEMS_ROOT", str(root))
    monkeypatch.setenv("HARNESS_SYSTEMS_ENVS", str(tmp_path / "envs"))
    plain = envs.checksum("mini")
    (root / "mini" / "pip-args.txt").write_text("--no-deps  # the pins list every package\n")
    assert envs.pip_args("mini") == ["--no-deps"] and envs.checksum("mini") != plain
    monkeypatch.setattr(envs.sys, "version", "another interpreter")
    assert envs.checksum("mini") != plain
    monkeypatch.undo()
    monkeypatch.setenv("HARNESS_SYSTEMS_ROOT", str(root))
    monkeypatch.setenv("HARNESS_SYSTEMS_ENVS", str(tmp_path / "envs"))
    seen: list[list[str]] = []
    real = envs.subprocess.Popen

    class Pip:  # pip itself is not run (no package is fetched): its command line is what counts
        def __new__(cls, cmd, **kwargs):
            if "pip" not in cmd:
                return real(cmd, **kwargs)  # python -m venv
            seen.append(cmd)
            return super().__new__(cls)

        def __init__(self, cmd, **kwargs):
            self.stdout = iter(["Collecting somepkg==1.0\n"])

        def wait(self):
            return 0

    monkeypatch.setattr(envs.subprocess, "Popen", Pip)
    python = envs.build("mini", quiet=True)
    pip = seen[0]
    assert pip[pip.index("--no-deps") + 1:] == ["-r", str(root / "mini" / "requirements.txt")]
    assert (python.parent.parent / envs.STAMP).read_text().strip() == envs.checksum("mini") and envs.ready("mini")


def test_method_name_accepts_a_systems_folder_and_nothing_else(monkeypatch):
    monkeypatch.setenv("HARNESS_SYSTEMS_ROOT", str(FIXTURES))
    assert load_config(["configs/locomo.yaml"], ["method.name=stdlib_turns"]).method.name == "stdlib_turns"
    with pytest.raises(ConfigError, match="systems/<name>/ with adapter.py"):
        load_config(["configs/locomo.yaml"], ["method.name=no_such_system"])
    from common.systems.process import ProcessSystem
    from common.systems.registry import system_class

    assert issubclass(system_class("stdlib_turns"), ProcessSystem)


def test_a_rendered_template_without_evidence_is_an_empty_buffer():
    """Graphiti's context is Zep's template even when its search found nothing: that buffer is
    empty (no fact, no entity), whatever text the template adds; a failed search is not."""
    from common.systems import outcomes
    from common.systems.graphiti import compose_context

    template = compose_context([], [])
    assert template.strip()
    row = {"buffer_text": template, "method_info": {"evidence": []}, "error": ""}
    assert outcomes.empty_buffer(row)
    assert not outcomes.empty_buffer({**row, "method_info": {"evidence": [{"text": "a fact"}]}})
    assert not outcomes.empty_buffer({**row, "error": "child_crash: exited"})
    assert outcomes.empty_buffer({"buffer_text": "  ", "episode_ids": []})  # a built-in system's


@pytest.mark.systems
def test_a_package_pip_cannot_install_is_named_in_one_line(tmp_path, monkeypatch):
    """A real pip in a real environment (a few seconds: make test-slow): the build stops with
    one line naming the package, pip's output kept in the log."""
    root = tmp_path / "systems"
    (root / "broken").mkdir(parents=True)
    (root / "broken" / "adapter.py").write_text("")
    (root / "broken" / "requirements.txt").write_text("simplemem==9.9.9\n")
    monkeypatch.setenv("HARNESS_SYSTEMS_ROOT", str(root))
    monkeypatch.setenv("HARNESS_SYSTEMS_ENVS", str(tmp_path / "envs"))
    with pytest.raises(envs.SystemEnvError) as err:
        envs.build("broken", quiet=True)
    assert "pip could not install simplemem==9.9.9" in str(err.value) and "\n" not in str(err.value)
    assert (tmp_path / "envs" / "broken" / "pip.log").read_text() and not envs.ready("broken")
