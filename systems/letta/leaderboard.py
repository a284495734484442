"""letta-leaderboard's LoCoMo file benchmark, as it ran against a Letta server, in process.

Reference: letta-ai/letta-leaderboard @802a794 ``leaderboard/locomo/locomo_benchmark.py``
(``LoCoMoQAFileBenchmark``, chunking ``session``) and ``leaderboard/locomo/locomo_agent.txt``.
What comes from there: the session files (named by their timestamp, a ``Timestamp:`` first line,
``speaker: text`` lines), one folder per conversation with its name and description, the
embedding config's ``embedding_chunk_size=100000`` (one passage per session), and the agent made
per question: its system prompt (``locomo_agent.txt``, byte for byte), ``include_base_tools=False``,
the tools ``search_files`` and ``answer_question`` (its function below, byte for byte: Letta
makes the tool's schema from its docstring), its tool rules, the folder attached to it, the
question sent as one user message, and the answer taken from the last ``answer_question`` return.

What Letta 0.16.8 needs differently (each a departure on the card, ``card.yaml``): no Letta
release has a tool named ``search_files``; Letta's semantic file search is
``semantic_search_files`` (its own tests call it "the search_files tool"), which the rules and
the tool list name instead. No Letta release has the agent type ``locomo_agent`` the reference
asks for; ``memgpt_v2_agent`` (the leaderboard's default agent type, and the newest loop at the
reference's commit) runs it. The REST route that attaches a folder also attaches Letta's file
tools (``open_files``, ``grep_files``, ``semantic_search_files``) and opens the folder's files
into the agent's context (as many as its context window allows); the adapter makes the same
three calls, then has Letta rebuild the agent's system prompt once (Letta 0.10, the leaderboard's,
did so before every request; 0.16.8 only when asked), so the agent here sees what the
leaderboard's saw.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

HERE = Path(__file__).resolve().parent
SYSTEM_PROMPT_FILE = HERE / "locomo_agent.txt"
EMBEDDING_CHUNK_SIZE = 100000  # the leaderboard's: a session file is never cut
# The leaderboard's model config for gpt-4.1-mini (llm_model_configs/openai-gpt-4.1-mini.json):
# Letta derives from it how many files it opens into the agent's context (15 of 40,000 chars).
CONTEXT_WINDOW = 1047576
SEARCH_TOOL = "semantic_search_files"  # what the leaderboard calls search_files
AGENT_TYPE = "memgpt_v2_agent"
MAX_STEPS = 50  # Letta's DEFAULT_MAX_STEPS, what the REST call's agent loop runs with

# The leaderboard's answer tool, byte for byte (its docstring is the description the model sees).
ANSWER_TOOL_SOURCE = '''def answer_question(answer: str) -> str:
    """
    Returns the provided answer to the user.
    Your answer should be as precise as possible. For example, "this month" is not precise, "June 2025" is precise.

    Args:
        answer (str): The answer to return.

    Returns:
        str: The provided answer.
    """
    return answer
'''


def file_name(date: Optional[str], index: int) -> str:
    """The leaderboard's name for a session's file: its timestamp ('/' and ':' made '-'), else
    ``session_NNN.txt`` (1-based)."""
    if date:
        return date.replace("/", "-").replace(":", "-") + ".txt"
    return f"session_{index + 1:03d}.txt"


def turn_line(turn: dict[str, Any]) -> str:
    return f"{turn['speaker']}: {turn['text']}"


def file_text(session: dict[str, Any], index: int) -> str:
    """A session's file: ``Timestamp: <date>`` (``Session <n>`` without a date), then one line per turn."""
    head = f"Timestamp: {session['date']}" if session.get("date") else f"Session {index + 1}"
    return "\n".join([head, *(turn_line(t) for t in session["turns"])])


def speakers(sessions: list[dict[str, Any]]) -> list[str]:
    """The conversation's speakers in order of first appearance (the folder's description names two)."""
    return list(dict.fromkeys(t["speaker"] for s in sessions for t in s["turns"]))


def folder_description(names: list[str]) -> str:
    """The folder's description, as the leaderboard writes it (its defaults when a name is missing)."""
    a = names[0] if names else "Speaker A"
    b = names[1] if len(names) > 1 else "Speaker B"
    return f"The conversation history, containing timestamped messages from {a} and {b}."


def agent_id(memory_id: str, question: str) -> str:
    """A fixed id per (memory, question): Letta writes the agent's id into its system prompt, so a
    random one would change every request and defeat the harness's cache."""
    digest = hashlib.sha256(f"{memory_id}\x00{question}".encode("utf-8")).digest()
    return f"agent-{uuid.UUID(bytes=digest[:16], version=4)}"  # Letta accepts uuid4-shaped ids only


@contextmanager
def seeded_uuids(seed: str) -> Iterator[None]:
    """``uuid.uuid4`` drawn from a generator seeded with ``seed`` inside the block: a new agent's
    first messages hold a tool call (its bootup ``send_message``) whose id Letta draws with uuid4
    and sends to the model in every request; a random one would defeat the harness's cache."""
    rng, original = random.Random(seed), uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)  # type: ignore[assignment]
    try:
        yield
    finally:
        uuid.uuid4 = original  # type: ignore[assignment]


PASSAGE_HEADER = re.compile(r"^=== (.+) \(passage #\d+\) ===$")


def search_passages(text: str) -> list[tuple[str, str]]:
    """(file name, the passage as the tool showed it) for each passage of a file search's result."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = PASSAGE_HEADER.match(line)
        if m:
            out.append((m.group(1), []))
        elif out:
            out[-1][1].append(line[2:] if line.startswith("  ") else line)
    return [(name, "\n".join(lines).strip()) for name, lines in out]


def shown_turns(text: str, turns: list[tuple[str, str]]) -> list[str]:
    """The ids of the turns whose line ``text`` shows (a tool shows part of a file: Letta's file
    search the first 20 lines of a passage, grep a few lines)."""
    lines = {line.strip() for line in text.splitlines()}
    return [tid for tid, line in turns if line.strip() in lines]


def shown_turns_within(text: str, turns: list[tuple[str, str]]) -> list[str]:
    """The ids of the turns whose line appears anywhere in ``text`` (grep and open_files prefix
    each line they show with its number)."""
    return [tid for tid, line in turns if line.strip() and line.strip() in text]


def call_text(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        args = arguments
    if isinstance(args, dict):  # Letta's bookkeeping arguments are not what the agent asked
        args = {k: v for k, v in args.items() if k not in ("inner_thoughts", "request_heartbeat")}
        return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
    return f"{name}({args!r})"
