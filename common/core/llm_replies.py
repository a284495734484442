"""Reading a model's reply: its text, tool calls and logprobs from a chat completion, the JSON
object inside a reply, and error lines with the API key masked.

Split from ``common.core.llm`` (which re-exports every name); none of it imports the SDK (a
completion is read by its attributes).
"""
from __future__ import annotations

import json
import re
from typing import Any, Optional

from common.core.llm_types import BadResponse


def reply_text(resp: Any) -> str:
    """The message text of a chat completion, or ``BadResponse`` when there is no completion."""
    choices = getattr(resp, "choices", None)
    if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
        shown = type(resp).__name__ if not isinstance(resp, str) else repr(resp[:60])
        raise BadResponse(f"response is not a chat completion with a message: {shown}")
    return choices[0].message.content or ""


def reply_tool_calls(resp: Any) -> list[dict[str, Any]]:
    """The tool calls of a chat completion in wire format (``id``, ``type``, ``function``)."""
    calls = getattr(resp.choices[0].message, "tool_calls", None) or []
    return [c.model_dump(mode="json", exclude_none=True) if hasattr(c, "model_dump") else dict(c) for c in calls]


def reply_logprobs(resp: Any) -> Optional[dict[str, Any]]:
    """``choices[0].logprobs`` of a chat completion in wire format (None when the server sent none)."""
    lp = getattr(resp.choices[0], "logprobs", None)
    if lp is None:
        return None
    return lp.model_dump(mode="json") if hasattr(lp, "model_dump") else dict(lp)


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_THINK = re.compile(r"^.*</think>", re.S)


def parse_json_object(text: str) -> dict[str, Any]:
    """Parse a JSON object from a model reply.

    Tolerates what OpenAI-compatible servers commonly wrap around JSON (a leading reasoning
    block closed by ``</think>``, a code fence, prose before the object) but never guesses
    content: the first decodable object is returned, or ``ValueError`` is raised.
    """
    s = _THINK.sub("", text).strip()
    s = _FENCE.sub("", s).strip()
    dec = json.JSONDecoder()
    for i, ch in enumerate(s):
        if ch == "{":
            try:
                obj, _ = dec.raw_decode(s, i)
            except json.JSONDecodeError as exc:
                if exc.pos >= len(s) - 1 or s.count("{", i) > s.count("}", i):
                    # The object never closes: the reply was cut off (max_tokens). Say so instead
                    # of returning some complete object nested inside it.
                    raise ValueError(f"truncated JSON reply ({len(s)} chars): {exc.msg}") from None
                continue
            if isinstance(obj, dict):
                return obj
    raise ValueError(f"no JSON object in reply: {s[:80]!r}")


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def scrub(text: str, secret: str) -> str:
    """``text`` with every occurrence of the API key masked (error bodies may quote it)."""
    return text.replace(secret, "***") if secret and secret != "EMPTY" else text
