"""Which memory system ``method.name`` names: a registered name or ``package.module:Class``.

A registered name maps to an import path, so reading the registry imports no system (mem0 is
imported only by a run that uses it). An import path lets a user run their own system without
editing the harness: the class must subclass ``MemorySystem`` and declare the protocol stages.
"""
from __future__ import annotations

import importlib
import typing

from common.core.config import ConfigError, MethodConfig
from common.systems import cards, envs
from common.systems.base import METHOD_STAGES, PROTOCOL_STAGES, MemorySystem
from common.systems.process import ProcessSystem, process_class

REGISTERED: dict[str, str] = {
    "ensimem": "common.systems.builtin:EnSIMem",
    "full_context": "common.systems.builtin:FullContext",
    "rag_turns": "common.systems.builtin:RagTurns",
    "no_memory": "common.systems.builtin:NoMemory",
    "oracle": "common.systems.builtin:Oracle",
    "mem0": "common.systems.mem0:Mem0",
    "amem": "common.systems.amem:AMem",
    "langmem": "common.systems.langmem:LangMem",
    "graphiti": "common.systems.graphiti:Graphiti",
    "simplemem": "common.systems.simplemem:SimpleMem",
}


def system_class(name: str) -> type[MemorySystem]:
    """The class of ``name``; a one-line ConfigError naming ``method.name`` when it is unusable.

    A name that is not registered but has ``systems/<name>/adapter.py`` is a system in its own
    environment and process (``common.systems.process``)."""
    if name not in REGISTERED and ":" not in name and envs.is_system(name):
        return process_class(name)
    path = REGISTERED.get(name, name)
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ConfigError(f"method.name: {name!r} is neither a registered system "
                          f"({', '.join(REGISTERED)}), a system in its own environment "
                          f"({', '.join(envs.names()) or 'none under ' + str(envs.systems_root())}) "
                          f"nor an import path package.module:Class")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"method.name: cannot import {path!r} ({type(exc).__name__}: {exc})") from exc
    if not (isinstance(cls, type) and issubclass(cls, MemorySystem)):
        raise ConfigError(f"method.name: {path!r} is not a subclass of common.systems.base.MemorySystem")
    missing = PROTOCOL_STAGES - cls.stages
    if missing:
        raise ConfigError(f"method.name: {path!r} leaves out protocol stages {sorted(missing)}")
    return cls


def native_answer_prompt(name: str) -> typing.Optional[str]:
    """The answer prompt 07 renders for ``name`` under ``systems.protocol: native`` (None: the
    harness's). A system in its own environment names it in its card (``answer.native``), read here
    and not when the class is made, so that a broken card still stops a run at 06 as before."""
    cls = system_class(name)
    if issubclass(cls, ProcessSystem):
        card = cards.load(name)
        return card.answer_prompt("native") if card else None
    return cls.native_answer_prompt


def uses_stage(name: str, stage: str) -> bool:
    """Whether the system runs the graph stage ``stage``: a method stage (``METHOD_STAGES``) only
    when the system declares it; the others say ``skipped``."""
    return stage not in METHOD_STAGES or stage in system_class(name).stages


def registered_names() -> tuple[str, ...]:
    """The names ``method.name`` accepts besides import paths (the config's Literal agrees)."""
    return tuple(typing.get_args(typing.get_args(typing.get_type_hints(MethodConfig)["name"])[0]))
