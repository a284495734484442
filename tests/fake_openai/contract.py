"""The rule every scripted reply follows: it carries only the fields its request asks for.

A request asks for fields in one of three ways: the JSON schema it sends (``response_format``
``json_schema``), the parameters of the tool it lets the model call, or the JSON its messages show
(the prompt's own example, such as ``{"items": [{"id": "...", "in_scope": true}]}``, a JSON value it
quotes, such as the candidate plan an audit returns, a key named in prose: ``with the key
"label"``, or a JSON schema written out in the prompt, whose declared fields it asks for as a
sent schema's are: ``You must respond with valid JSON matching this schema: {"properties": ...}``).
A field is a path: object keys joined by ``.``, ``[]`` for the elements of an array
(``items[].duplicate_of``; ``[].keywords`` for the objects of a top-level array).

``requested_fields(body)`` is what a request names; ``unrequested(reply, requested)`` the paths of a
reply it does not. The fake server checks every JSON reply it builds against its request
(``check_reply``, raising ``ContractError``); ``tests/test_reply_contract.py`` also checks the other
side: every field the harness's code reads from a reply is one its request names.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Optional

WILDCARD = "*"  # a path segment standing for any key (a schema's additionalProperties)
# A key named in prose: `with the key "label"`, `the key as "label"`, `keys "a" and "b"`.
PROSE_KEY_RE = re.compile(r"\bkeys?\b(?:\s+as)?\s+[\"\u201c]([A-Za-z_][\w ]{0,40}?)[\"\u201d]")
BLOCK_RE = re.compile(r"\n[ \t]*\n")  # blank lines end a JSON example: a stray bracket in data stays local


class ContractError(ValueError):
    """A scripted reply carries a field its request does not ask for."""


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------- what a prompt shows
def _shown_in_block(block: str, out: set[str]) -> None:
    """Add the key paths of the JSON shapes in one block of prompt text to ``out``.

    Tolerant of what prompts write inside an example (``or null``, ``True or False``, ``// comments``,
    ``...``): only quoted keys followed by ``:`` count, placed by the brackets around them. Outside any
    bracket, text is prose: a top-level ``[`` opens an array only when an object follows it.
    """
    stack: list[list[Any]] = []  # [kind "{" or "[", path, the key whose value comes next]
    i, n = 0, len(block)
    while i < n:
        c = block[i]
        if not stack:
            if c == "{":
                stack.append(["{", "", None])
            elif c == "[" and block[i + 1:].lstrip().startswith("{"):
                stack.append(["[", "[]", None])
            i += 1
            continue
        top = stack[-1]
        if c == '"':
            end = i + 1
            while end < n and block[end] not in '"\n':
                end += 2 if block[end] == "\\" else 1
            text = block[i + 1:end]
            rest = end + 1
            while rest < n and block[rest] in " \t":
                rest += 1
            if top[0] == "{" and rest < n and block[rest] == ":":
                out.add(join(top[1], text))
                top[2] = text
                i = rest + 1
            else:
                i = end + 1
            continue
        if c == "/" and block[i:i + 2] == "//":  # a comment inside an example runs to the end of its line
            nl = block.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if c in "{[":
            base = join(top[1], top[2]) if top[0] == "{" and top[2] is not None else top[1]
            stack.append([c, base + "[]" if c == "[" else base, None])
        elif c in "}]":
            stack.pop()
        elif c == "," and top[0] == "{":
            top[2] = None
        i += 1


def shown_fields(text: str) -> set[str]:
    """The field paths the JSON shapes in ``text`` show, and the keys its prose names."""
    out: set[str] = set()
    for block in BLOCK_RE.split(text):
        _shown_in_block(block, out)
    out.update(m.group(1) for m in PROSE_KEY_RE.finditer(text))
    return out


# --------------------------------------------------------------------------- what a schema declares
def schema_fields(schema: Any, root: Optional[dict[str, Any]] = None, path: str = "",
                  seen: frozenset[str] = frozenset()) -> set[str]:
    """The field paths a JSON schema declares (``properties`` and ``required`` names; ``$ref`` into
    ``$defs``/``definitions``, ``anyOf``, ``oneOf``, ``allOf``, ``items``; ``additionalProperties`` and
    ``patternProperties`` as a ``*`` segment)."""
    root = root if root is not None else (schema if isinstance(schema, dict) else {})
    if not isinstance(schema, dict):
        return set()
    out: set[str] = set()
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        target: Any = root
        for part in ref.lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        out |= schema_fields(target, root, path, seen | {ref})
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key) or []:
            out |= schema_fields(option, root, path, seen)
    for name, sub in (schema.get("properties") or {}).items():
        out.add(join(path, name))
        out |= schema_fields(sub, root, join(path, name), seen)
    out.update(join(path, str(name)) for name in schema.get("required") or [])  # asked for, if not described
    extra = schema.get("additionalProperties")
    for any_key in [extra] + list((schema.get("patternProperties") or {}).values()):
        if isinstance(any_key, dict) or any_key is True:
            out.add(join(path, WILDCARD))
            out |= schema_fields(any_key if isinstance(any_key, dict) else {}, root, join(path, WILDCARD), seen)
    items = schema.get("items")
    if isinstance(items, dict):
        out |= schema_fields(items, root, path + "[]", seen)
    return out


def json_schema_of(body: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The ``response_format`` json_schema's schema a request sends, or None."""
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and isinstance(rf.get("json_schema"), dict):
        schema = rf["json_schema"].get("schema")
        return schema if isinstance(schema, dict) else {}
    return None


def message_text(messages: Any) -> str:
    """Every message's text (string contents and text parts), one after another."""
    parts: list[str] = []
    for m in messages if isinstance(messages, list) else []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n\n".join(parts)


def shown_schemas(text: str) -> list[dict[str, Any]]:
    """The JSON schemas written out in prompt text: each JSON object in it with ``properties`` and
    ``"type": "object"`` (a schema's own sub-objects are inside it, not listed again)."""
    found: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    at = text.find("{")
    while at >= 0:
        try:
            obj, end = decoder.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        if isinstance(obj, dict) and obj.get("type") == "object" and isinstance(obj.get("properties"), dict):
            found.append(obj)
        at = text.find("{", end)
    return found


def prompt_fields(text: str) -> set[str]:
    """The field paths prompt text asks for: the JSON it shows, and the fields of the schemas it
    writes out."""
    out = shown_fields(text)
    for schema in shown_schemas(text):
        out |= schema_fields(schema)
    return out


def requested_fields(body: dict[str, Any]) -> set[str]:
    """The field paths a chat request asks for in its message content: its json_schema's, and the
    JSON and schemas its messages show (a tool call's arguments are checked against the tool:
    ``tool_fields``)."""
    schema = json_schema_of(body)
    named = prompt_fields(message_text(body.get("messages")))
    return named | schema_fields(schema) if schema is not None else named


def tool_fields(body: dict[str, Any], name: str) -> set[str]:
    """The argument paths the request's tool ``name`` declares."""
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            return schema_fields(fn.get("parameters") or {})
    return set()


# --------------------------------------------------------------------------- a reply against them
def reply_fields(obj: Any, path: str = "") -> set[str]:
    """Every field path of a JSON value."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.add(join(path, str(key)))
            out |= reply_fields(value, join(path, str(key)))
    elif isinstance(obj, list):
        for value in obj:
            out |= reply_fields(value, path + "[]")
    return out


def covered(path: str, requested: Iterable[str]) -> bool:
    """Whether ``requested`` names ``path`` (a ``*`` segment of a requested path matches any key)."""
    wanted = set(requested)
    if path in wanted:
        return True
    parts = path.split(".")
    return any(len(w.split(".")) == len(parts) and all(a in (b, WILDCARD) for a, b in zip(w.split("."), parts))
               for w in wanted if WILDCARD in w)


def unrequested(obj: Any, requested: Iterable[str]) -> list[str]:
    """The field paths of ``obj`` that ``requested`` does not name, sorted."""
    wanted = set(requested)
    return sorted(p for p in reply_fields(obj) if not covered(p, wanted))


def check_reply(content: str, requested: Callable[[], Iterable[str]], what: str) -> None:
    """Raise ``ContractError`` when the JSON in ``content`` carries a field that ``requested()`` (the
    request's fields, computed only for a JSON reply) does not name; plain text is left alone."""
    try:
        obj = json.loads(content)
    except (TypeError, ValueError):
        return
    extra = unrequested(obj, requested()) if isinstance(obj, (dict, list)) else []
    if extra:
        raise ContractError(f"fake-openai: the scripted reply to {what} carries fields its request does not "
                            f"ask for: {', '.join(extra)}")
