"""The fake server's replies to mem0's graph memory (``systems/mem0_graph``, mem0ai 1.0.11), whose
requests come through the gateway as ``gateway.mem0_graph``.

Two prompts ask for JSON in their text alone (``response_format`` ``json_object``): the user-memory
extraction (its examples show ``{"facts": [...]}``) and the memory update (its structure shows
``{"memory": [{"id", "text", "event", "old_memory"}]}``). The graph's three calls offer one tool
each: ``extract_entities`` (``entities[].entity``, ``entity_type``), ``establish_relationships``
(``entities[].source``, ``relationship``, ``destination``) and ``delete_graph_memory``. Each reply
is read from the request's own text and names only the fields it asks for:

* facts: one per line of the speaker whose memory it is (``user: <name>: <text>``);
* update: every new fact added, unless an existing memory already says it (then ``NONE``);
* entities: the speakers of ``<name>: <text>`` lines and the capitalised words of the text that
  are not question or stop words (a question: its names);
* relations: each speaker ``mentions`` every listed entity its line names, else the line's first
  content word;
* deletion: no call (nothing the fake says contradicts an earlier line).
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any, Optional

from tests.fake_openai.scripted import (
    GATEWAY_PREFIX,
    STOPWORDS,
    TEXT_KINDS_BY_PROMPT,
    TOOL_CALLS_BY_PROMPT,
    WORD_RE,
    _message_text,
    content_words,
)

PROMPT_ID = GATEWAY_PREFIX + "mem0_graph"
SAID_RE = re.compile(r"^(?:(user|assistant): )?([A-Z][\w.'-]*(?: [A-Z][\w.'-]*)?): (.+)$")
UPDATE_MARKER = "The new retrieved facts are mentioned in the triple backticks"
BACKTICKS = re.compile(r"```\s*(.*?)\s*```", re.S)


def _said(text: str) -> list[tuple[str, str, str]]:
    """(role or '', speaker, words) of each ``[role: ]<speaker>: <text>`` line."""
    out = []
    for line in text.splitlines():
        m = SAID_RE.match(line.strip())
        if m:
            out.append((m.group(1) or "", m.group(2), m.group(3).strip()))
    return out


def reply_facts(text: str) -> dict[str, Any]:
    section = text.rsplit("Input:\n", 1)[-1]
    return {"facts": [f"{who} said: {said}" for role, who, said in _said(section) if role == "user"]}


def reply_update(text: str) -> dict[str, Any]:
    before, after = text.split(UPDATE_MARKER, 1)
    new = BACKTICKS.search(after)
    facts = ast.literal_eval(new.group(1)) if new else []
    old_block = BACKTICKS.findall(before)
    old = ast.literal_eval(old_block[-1]) if old_block and "Current memory is empty" not in before[-200:] else []
    known = {str(m.get("text")): str(m.get("id")) for m in old if isinstance(m, dict)}
    memory = []
    for i, fact in enumerate(str(f) for f in facts):
        if fact in known:
            memory.append({"id": known[fact], "text": fact, "event": "NONE"})
        else:
            memory.append({"id": str(len(old) + i), "text": fact, "event": "ADD"})
    return {"memory": memory}


def memory_reply(text: str) -> str:
    return json.dumps(reply_update(text) if UPDATE_MARKER in text else reply_facts(text))


def _names(text: str) -> list[str]:
    """Capitalised words that are not question or stop words, in order, once each."""
    return list(dict.fromkeys(w for w in WORD_RE.findall(text) if w[0].isupper() and w.lower() not in STOPWORDS))


def entities(message: str) -> list[dict[str, str]]:
    lines = _said(message)
    found = [(who, "person") for _, who, _ in lines]
    words = " ".join(said for _, _, said in lines) if lines else message
    found += [(w, "entity") for w in _names(words)]
    seen: dict[str, str] = {}
    for name, kind in found:
        seen.setdefault(name, kind)
    return [{"entity": name, "entity_type": kind} for name, kind in list(seen.items())[:8]]


def relations(message: str) -> list[dict[str, str]]:
    listed_part, _, text = message.partition("\n\nText: ")
    m = re.search(r"List of entities: (\[.*?\])\.", listed_part, re.S)
    listed = [str(e).replace("_", " ") for e in ast.literal_eval(m.group(1))] if m else []
    out = []
    for _, who, said in _said(text):
        named = [e for e in listed if e.lower() != who.lower() and e.lower() in said.lower()]
        targets = named or content_words(said)[:1]
        out += [{"source": who, "relationship": "mentions", "destination": t} for t in targets]
    return out


def graph_tool_args(name: str, messages: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    last = _message_text(messages[-1]) if messages else ""
    if name == "extract_entities":
        return {"entities": entities(last)}
    if name == "establish_relationships":
        return {"entities": relations(last)}
    return None  # delete_graph_memory: nothing to delete


TEXT_KINDS_BY_PROMPT[PROMPT_ID] = memory_reply
TOOL_CALLS_BY_PROMPT[PROMPT_ID] = graph_tool_args
