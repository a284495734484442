"""Modules imported on first attribute access (the standard library's ``importlib.util.LazyLoader``).

A numbered script runs one stage in its own process, so an import that only some calls need would
be paid by every such process; a lazily loaded module costs nothing until a name of it is used.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """``name`` as a module object that executes on first attribute access (already imported: as is)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
