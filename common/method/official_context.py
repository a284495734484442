"""REALTALK's full-context prompt as its official scorer builds it (``method.context_builder``).

``eval_memory/qa_tool.py`` of danny911kr/REALTALK @b903e06a, ``QATool.invoke``: a header naming the
two speakers (``common/prompts/context_realtalk_header.txt``, the official ``CONV_START_PROMPT``)
followed by ``get_input_context``'s text; ``answer.prompt: realtalk`` then adds the official QA
prompt. ``get_input_context`` takes the session numbers of every key of the chat that contains
"session" and not "date_time": ``session_N`` and ``events_session_N`` both, so each number twice
(every chat of the release has both keys for every session). For each number, in ascending order,
it puts the session's block IN FRONT of the text so far: every session appears twice, newest first.
A block is ``DATE: <session date>`` and ``CONVERSATION:``, then one line per turn,
``<speaker> said, "<clean_text>"``, with ``<speaker> shared, an image of "<blip_caption>".`` after a
turn that has a caption, then an empty line.

* ``official``: that text, byte for byte (about 46k o200k tokens for chat 3, 23k once).
* ``chronological``: the same header and blocks, each session once, oldest first.

The header's speakers are ``list(set(<speakers of session 1's turns>))`` officially, an order that
depends on the process's string hash seed, so the prompt (and its cache key) changes from run to
run. ``method.context_hash_seed: N`` reproduces the order CPython 3.11+ gives under
``PYTHONHASHSEED=N`` (asked of a child interpreter started with that seed); null (the default) names
them in their order of first appearance in session 1, one prompt whatever the seed.

Both builders drop whole sessions from the oldest end when the text exceeds ``method.context_tokens``
(officially nothing is dropped; the release's chats fit a 128k window twice over).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from typing import Any, Optional

from common.core import prompts
from common.core.schema import Session
from common.core.tokens import count_tokens
from common.method.render import MemoryView

HEADER_ID = "context_realtalk_header"
BUILDERS = ("official", "chronological")


def session_block(session: Session) -> str:
    """One session as ``get_input_context`` writes it, the empty line after it included."""
    lines = []
    for t in session.turns:
        turn = f'{t.speaker} said, "{t.text}"'
        if t.blip_caption:  # the official code tests for the key; the release has no empty caption
            turn += f'\n{t.speaker} shared, an image of "{t.blip_caption}".'
        lines.append(turn + "\n")
    return f"DATE: {session.date_time}\nCONVERSATION:\n" + "".join(lines) + "\n"


@lru_cache(maxsize=256)
def hash_order(names: tuple[str, ...], seed: int) -> tuple[str, ...]:
    """``tuple(set(names))`` as CPython iterates it under ``PYTHONHASHSEED=seed`` (inserted in this
    order, as the official list comprehension inserts the turns' speakers)."""
    code = "import json, sys; print(json.dumps(list(set(json.loads(sys.argv[1])))))"
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(list(names))], env=env, capture_output=True,
                         text=True, check=True)
    return tuple(json.loads(out.stdout))


def speakers(view: MemoryView, hash_seed: Optional[int]) -> tuple[list[str], str]:
    """The header's two names and how they were ordered.

    Officially the distinct speakers of the first session's turns, indexed [0] and [1] (a first
    session with one speaker would stop the official run with an IndexError; here the memory's other
    speaker from its ``name`` field completes the pair, and the order says so)."""
    first = view.sessions[0] if view.sessions else None
    seen = list(dict.fromkeys(t.speaker for t in first.turns)) if first else []
    rule = "first appearance in session 1"
    if hash_seed is not None and seen:
        seen, rule = list(hash_order(tuple(seen), hash_seed)), f"set() order under PYTHONHASHSEED={hash_seed}"
    if len(seen) < 2:
        others = [s for s in (first.speakers if first else []) if s not in seen]
        seen, rule = (seen + others + ["", ""])[:2], rule + "; completed from the chat's name field"
    return seen[:2], rule


def build(view: MemoryView, builder: str, hash_seed: Optional[int], context_tokens: int
          ) -> tuple[str, list[Session], dict[str, Any]]:
    """(the text, the sessions it shows, what the retrieval row records) for one memory."""
    if builder not in BUILDERS:
        raise ValueError(f"method.context_builder: {builder!r} is not one of {', '.join(BUILDERS)}")
    names, rule = speakers(view, hash_seed)
    header = prompts.fill_once(HEADER_ID, speaker_1=names[0], speaker_2=names[1])
    copies = 2 if builder == "official" else 1
    blocks = [session_block(s) for s in view.sessions]
    budget = context_tokens - count_tokens(header)
    kept: list[int] = []
    total = 0
    for i in reversed(range(len(blocks))):  # newest first: the oldest sessions are dropped first
        n = copies * count_tokens(blocks[i])
        if total + n > budget:
            break
        kept.append(i)
        total += n
    kept.sort()
    if builder == "official":  # ascending numbers, each twice, each block put in front: newest first
        body = "".join(blocks[i] + blocks[i] for i in reversed(kept))
    else:
        body = "".join(blocks[i] for i in kept)
    sessions = [view.sessions[i] for i in kept]
    info = {"context_builder": builder, "speakers": names, "speaker_order": rule, "copies_per_session": copies,
            "sessions_total": len(view.sessions), "sessions_dropped_oldest": len(view.sessions) - len(kept),
            "context_tokens_limit": context_tokens}
    return header + body, sessions, info
