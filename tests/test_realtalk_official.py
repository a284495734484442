"""REALTALK's official scorer itself against the harness (common.evaluation.realtalk, official_context).

``evaluate_memory.py``, ``eval_memory/qa_tool.py`` and ``utils/`` are read at test time from the
fetched repository (``REALTALK_REPO``, default the workplace mirror of danny911kr/REALTALK) into the
test's tmp dir, and run with stand-ins for the LLM (``OpenAIGenerator``'s client) and ``loguru``;
nothing of the official code is vendored. Each defect is shown on the official code and its
reproduction on the harness: the context (every session twice, newest first), the header's speaker
order under two hash seeds, the GPT score asked of the answer model, requests without temperature.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.benchmarks import realtalk
from common.core import prompts
from common.core.config import load_config
from common.core.io import write_jsonl
from common.core.llm import LLMClient
from common.core.schema import AnswerRow, RetrievalRow, to_dict
from common.evaluation import realtalk as scorer
from common.evaluation.metrics import locomo_f1
from common.method import official_context
from common.method.answer import answer_messages
from common.method.render import MemoryView
from tests.conftest import REPO
from tests.test_realtalk import seeds_with_both_orders

REALTALK_REPO = Path(os.environ.get("REALTALK_REPO", "/work/.mirror/danny911kr+REALTALK/repo"))
FILES = ("evaluate_memory.py", "eval_memory/qa_tool.py", "utils/utils_llm.py", "utils/utils_file.py")
TINY = REPO / "tests" / "fixtures" / "realtalk_tiny"
SHARED = REPO.parent / "shared" / "data" / "realtalk"
FAKE_LOGURU = ("import types, sys\nsys.modules.setdefault('loguru', types.SimpleNamespace("
               "logger=types.SimpleNamespace(error=print, warning=print, info=print)))\n")


@pytest.fixture(scope="module")
def official_root(tmp_path_factory) -> Path:
    if not (REALTALK_REPO / "HEAD").exists() and not (REALTALK_REPO / ".git").exists():
        pytest.skip(f"the official REALTALK repository is not at {REALTALK_REPO} (set REALTALK_REPO to a clone)")
    root = tmp_path_factory.mktemp("realtalk_official")
    for f in FILES:
        text = subprocess.run(["git", "-C", str(REALTALK_REPO), "show", f"HEAD:{f}"], check=True,
                              capture_output=True, text=True).stdout
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text(text, encoding="utf-8")
    for pkg in ("eval_memory", "utils"):
        (root / pkg / "__init__.py").write_text("", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def official(official_root):
    names = ["eval_memory", "eval_memory.qa_tool", "utils", "utils.utils_llm", "utils.utils_file", "evaluate_memory"]
    saved = {k: sys.modules.get(k) for k in [*names, "loguru"]}
    exec(FAKE_LOGURU)  # the official code logs with loguru, which the harness does not install
    sys.path.insert(0, str(official_root))
    try:
        yield SimpleNamespace(qa=importlib.import_module("eval_memory.qa_tool"),
                              llm=importlib.import_module("utils.utils_llm"),
                              evaluate=importlib.import_module("evaluate_memory"))
    finally:
        sys.path.remove(str(official_root))
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class StubGenerator:
    """The official ``OpenAIGenerator`` as QATool uses it: ``generate`` answers, ``generate_json`` scores."""

    calls: list = []

    def __init__(self, model, oai_api_key=""):
        self.model = model

    def generate(self, messages, **kw):
        StubGenerator.calls.append((self.model, "generate", messages[0].content))
        return SimpleNamespace(content=ANSWERS.get(messages[0].content.rsplit("Question: ", 1)[-1].split("\n")[0],
                                                   "no idea"))

    def generate_json(self, messages, **kw):
        StubGenerator.calls.append((self.model, "generate_json", messages[0].content))
        question = messages[0].content.split("Question: ", 1)[1].split("\n")[0]
        return SimpleNamespace(content={"score": SCORES.get(question, 0)})


ANSWERS = {"What hobbies does Maren have?": "pottery", "When did Maren make a bowl?": "on January 5",
           "Would tobias enjoy a boat trip?": "yes", "Where does tobias work?": "at a bakery",
           "Who visits Maren from Lisbon?": "her brother"}
SCORES = {"What hobbies does Maren have?": 0.5, "When did Maren make a bowl?": 1, "Would tobias enjoy a boat trip?": 1,
          "Where does tobias work?": 0.8, "Who visits Maren from Lisbon?": 0}


def tool(official, qa_model="answer-m", evaluate_model="judge-m"):
    official.qa.OpenAIGenerator = StubGenerator
    StubGenerator.calls = []
    return official.qa.QATool(qa_model, evaluate_model=evaluate_model)


def chats(with_shared: bool = True) -> list[Path]:
    return realtalk.chat_files(TINY) + (realtalk.chat_files(SHARED) if with_shared and SHARED.exists() else [])


# --------------------------------------------------------------------------- prompts and context
def test_the_three_prompts_are_the_official_strings(official):
    t = tool(official)
    assert prompts.fill_once("context_realtalk_header", speaker_1="Ann", speaker_2="Bo") == \
        t.CONV_START_PROMPT.format("Ann", "Bo")
    assert prompts.fill_once("answer_realtalk_user", context="CTX", question="Q?") == \
        "CTX" + "\n\n" + t.QA_PROMPT.format("Q?")
    t.gpt_score("When was it?", "May 3rd", "In May")  # (question, prediction, answer), as invoke passes them
    model, method, sent = StubGenerator.calls[-1]
    assert sent == scorer.gpt_messages("When was it?", "In May", "May 3rd")[0]["content"]


@pytest.mark.parametrize("path", chats(), ids=lambda p: p.name)
def test_the_official_context_is_get_input_context_byte_for_byte(official, path):
    t = tool(official)
    doc = json.loads(path.read_text(encoding="utf-8"))
    data = realtalk.load_realtalk(path.parent)
    mid = realtalk.memory_id(path)
    view = MemoryView(mid, [s for s in data.sessions if s.memory_id == mid])
    text, _, info = official_context.build(view, "official", None, 10**9)
    names = info["speakers"]
    assert text == t.CONV_START_PROMPT.format(*names) + t.get_input_context(doc)
    # The defect, on the official code: every session twice, the newest first.
    body = t.get_input_context(doc)
    blocks = [official_context.session_block(s) for s in view.sessions]
    assert body.count(blocks[0]) == 2 and body.index(blocks[-1]) < body.index(blocks[0])


def _official_prompt(root: Path, chat: Path, hash_seed: int) -> str:
    """The answer prompt ``QATool.invoke`` sends for the chat's first question, in a child interpreter
    started with ``PYTHONHASHSEED=hash_seed`` (the official header reads list(set(...)))."""
    code = FAKE_LOGURU + (
        "import json, sys\nsys.path.insert(0, sys.argv[1])\nfrom eval_memory import qa_tool\n"
        "class G:\n    def __init__(self, model, oai_api_key=''): pass\n"
        "    def generate(self, messages, **kw):\n        print(json.dumps(messages[0].content)); sys.exit(0)\n"
        "qa_tool.OpenAIGenerator = G\n"
        "doc = json.load(open(sys.argv[2]))\nq = doc['qa'][0]\n"
        "qa_tool.QATool('a', 'b').invoke(q['question'], q['answer'], q['category'], doc)\n")
    out = subprocess.run([sys.executable, "-c", code, str(root), str(chat)], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONHASHSEED": str(hash_seed)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_official_prompt_changes_with_the_hash_seed_and_the_harness_reproduces_each(official_root):
    chat = TINY / "Chat_2_Ilse_Ruben.json"
    data = realtalk.load_realtalk(TINY)
    view = MemoryView("realtalk-2", [s for s in data.sessions if s.memory_id == "realtalk-2"])
    sent = {seed: _official_prompt(official_root, chat, seed) for seed in seeds_with_both_orders(("Ruben", "Ilse"))}
    assert len(set(sent.values())) == 2, "the official prompt depends on PYTHONHASHSEED"
    q = data.questions[5]
    assert q.qid == "realtalk-2:q0001"
    for seed, text in sent.items():
        buffer, _, _ = official_context.build(view, "official", seed, 10**9)
        row = RetrievalRow(qid=q.qid, memory_id=q.memory_id, question=q.question, mode="full_context", scope="",
                           reasoning_type="", selected=[], episode_ids=[], dia_ids=[], coverage={},
                           buffer_text=buffer, buffer_tokens=0, seconds=0.0)
        assert answer_messages(q, None, row, style="realtalk") == [{"role": "user", "content": text}]


# --------------------------------------------------------------------------- scores
def test_the_lexical_score_is_the_harness_locomo_f1(official, capsys):
    t = tool(official)
    golds = [(q["answer"], q["category"]) for p in chats() for q in json.loads(p.read_text())["qa"]]
    predictions = ["", "yes", "Pixel", "pottery, sailing", "in January 2024", "probably, his uncle owns a boat"]
    checked = 0
    for i, (gold, category) in enumerate(golds):
        for p in predictions + [gold, gold.upper(), ", ".join(reversed(gold.split(","))), golds[i - 1][0]]:
            assert locomo_f1(p, gold, category) == t.compute_lexical_score(p, gold, category), (p, gold, category)
            checked += 1
    capsys.readouterr()  # the official function prints every prediction
    assert checked >= 10 * len(golds)


def test_the_official_gpt_score_asks_the_answer_model_and_the_switch_reproduces_it(official):
    """Defect: ``gpt_score`` calls ``self.qa_model.generate_json``, the model that answered; the
    ``--evaluate_model`` it documents is never called."""
    t = tool(official, qa_model="answer-m", evaluate_model="judge-m")
    assert t.gpt_score("Q?", "gold", "pred") == 0
    assert [(m, kind) for m, kind, _ in StubGenerator.calls] == [("answer-m", "generate_json")]
    sets = ["models.answer.model=answer-m", "models.judge.model=judge-m"]
    assert load_config(["configs/realtalk.yaml"], sets + ["score.realtalk_gpt_score_model=answer"]
                       ).role("gpt_score").model == "answer-m"


class Recorder:
    def __init__(self):
        self.kwargs: list[dict] = []

    def with_options(self, **kw):
        return self

    @property
    def chat(self):
        return SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **kw):
        self.kwargs.append(kw)
        from openai.types.chat import ChatCompletion

        return ChatCompletion.model_validate({
            "id": "x", "object": "chat.completion", "created": 0, "model": kw["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                                           "content": '{"score": 1}'}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def test_the_official_requests_carry_no_temperature_and_the_switch_reproduces_them(official):
    """Defect: ``OpenAIGenerator.generate`` sends model and messages only (the API's default sampling)."""
    gen = official.llm.OpenAIGenerator(oai_api_key="k", model="m")
    gen.sync_client = Recorder()
    msgs = [official.llm.LLMMessage(role="user", content="x")]
    gen.generate(messages=msgs)
    gen.generate_json(messages=msgs)
    answer, score = gen.sync_client.kwargs
    assert set(answer) == {"model", "messages"} and set(score) == {"model", "messages", "response_format"}
    cfg = load_config(["configs/realtalk_official.yaml"])
    user = [{"role": "user", "content": "x"}]
    assert set(LLMClient.request_body(cfg.role("answer"), user, json_mode=False)) == set(answer)
    assert set(LLMClient.request_body(cfg.role("gpt_score"), user, json_mode=True)) == set(score)
    assert LLMClient.request_body(cfg.role("gpt_score"), user, json_mode=True)["response_format"] == \
        score["response_format"]


def test_the_official_per_category_means_of_a_chat_are_the_harness_means(official, official_root, tmp_path,
                                                                         monkeypatch, capsys):
    """``run_evaluate`` on one chat (its predictions and GPT scores from the stand-in LLM) against the
    harness's aggregation of the same predictions and scores."""
    (tmp_path / "data").mkdir()
    chat = TINY / "Chat_1_Maren_Tobias.json"
    (tmp_path / "data" / chat.name).write_text(chat.read_text())
    monkeypatch.chdir(tmp_path)
    official.evaluate.QATool = lambda qa, evaluate_model: tool(official, qa, evaluate_model)
    official.evaluate.run_evaluate(f"data/{chat.name}", "answer-m", "judge-m")
    result = json.loads(next((tmp_path / "output").glob("*_memory_results_answer-m.json")).read_text())
    capsys.readouterr()
    data = realtalk.load_realtalk(TINY)
    golds = [g for g in data.gold if g.memory_id == "realtalk-1"]
    questions = {q.qid: q.question for q in data.questions}
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.resolved.yaml").write_text("benchmark: realtalk\n")
    write_jsonl(run / "01_gold.jsonl", [to_dict(g) for g in golds])
    write_jsonl(run / "07_answer.jsonl", [to_dict(AnswerRow(qid=g.qid, memory_id=g.memory_id, question=questions[g.qid],
                                                            answer=ANSWERS[questions[g.qid]], model="a", prompt_id="p"))
                                          for g in golds])
    write_jsonl(run / "08_judge_j.jsonl", [{"qid": g.qid, "label": 1, "judge_model": "m", "prompt_id": "p",
                                            "scores": {"gpt_score": SCORES[questions[g.qid]], "gpt_score_error": "",
                                                       "gpt_score_model": "answer-m"}} for g in golds])
    handle = SimpleNamespace(dir=run, cfg=SimpleNamespace(run=SimpleNamespace(name="t")),
                             path=lambda n: run / {"gold": "01_gold.jsonl", "answers": "07_answer.jsonl",
                                                   "retrievals": "06_retrieve.jsonl"}[n],
                             judge_path=lambda j: run / f"08_judge_{j}.jsonl")
    metrics = scorer.aggregate(handle, ["j"])
    names = realtalk.CATEGORY_NAMES
    for category, mean in result["lexical_mean"].items():
        assert metrics["f1_official"]["by_category"][names[int(category)]]["mean"] == round(mean, 4)
    for category, mean in result["gpt_mean"].items():
        assert metrics["judges"]["j"]["gpt_score"]["by_category"][names[int(category)]]["mean"] == round(mean, 4)
    assert len(result["predictions"]) == len(golds) == 5
