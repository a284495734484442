"""Prompt templates: plain text files in ``common/prompts/``, referenced by id.

Templates contain literal JSON braces, so substitution replaces only the ``{name}`` slots it is
given instead of using ``str.format``.

A prompt SET (config ``prompts.set``) is a folder ``common/prompts/<set>/`` holding the templates
it replaces; its ids are dotted, ``code_rules.plan_user`` = ``common/prompts/code_rules/plan_user.txt``.
``pick`` gives the set's template where it has one, else the paper's (``paper`` is the top folder).
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

PROMPT_DIR = Path(__file__).resolve().parents[1] / "prompts"


PAPER = "paper"


def _path(prompt_id: str) -> Path:
    folder, _, stem = prompt_id.rpartition(".")
    return PROMPT_DIR / folder / f"{stem}.txt" if folder else PROMPT_DIR / f"{stem}.txt"


def pick(name: str, prompt_set: str = PAPER) -> str:
    """The id of template ``name`` in ``prompt_set``: the set's own file if it has one, else the paper's."""
    if prompt_set != PAPER and _path(f"{prompt_set}.{name}").exists():
        return f"{prompt_set}.{name}"
    return name


def exists(prompt_id: str) -> bool:
    """Whether template ``prompt_id`` has a file."""
    return _path(prompt_id).exists()


@functools.lru_cache(maxsize=None)
def load(prompt_id: str) -> str:
    path = _path(prompt_id)
    if not path.exists():
        raise FileNotFoundError(f"unknown prompt id '{prompt_id}' (no {path})")
    text = path.read_text(encoding="utf-8")
    # Files end with one newline for editors; the template itself does not.
    return text[:-1] if text.endswith("\n") else text


def fill(prompt_id: str, **slots: object) -> str:
    """The template with each given ``{name}`` slot replaced by its value."""
    text = load(prompt_id)
    for name, value in slots.items():
        marker = "{" + name + "}"
        if marker not in text:
            raise KeyError(f"prompt '{prompt_id}' has no slot {marker}")
        text = text.replace(marker, str(value))
    return text


def fill_once(prompt_id: str, **slots: object) -> str:
    """The template with its ``{name}`` slots filled in ONE pass, as ``str.format`` or an f-string
    fills them: a filled value is never scanned again (``fill`` fills one slot after another)."""
    text = load(prompt_id)
    for name in slots:
        if "{" + name + "}" not in text:
            raise KeyError(f"prompt '{prompt_id}' has no slot {{{name}}}")
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in slots))
    return pattern.sub(lambda m: str(slots[m.group(0)[1:-1]]), text)


def prompt_hash(*prompt_ids: str) -> str:
    """Short hash of template texts, stored with outputs so prompt edits are visible."""
    h = hashlib.sha256()
    for pid in prompt_ids:
        h.update(pid.encode() + b"\0" + load(pid).encode("utf-8") + b"\0")
    return h.hexdigest()[:12]
