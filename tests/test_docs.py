"""The README and the docs site: short README, every nav page present, every relative link resolving.

The strict MkDocs build (`make docs`, run by `.ci/run`) is the full check; these tests are the fast
part of it that needs no build: they read the Markdown and mkdocs.yml only.
"""
from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README_MAX_LINES = 200

# Markdown links and images: [text](target) / ![alt](target), target up to a space or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
# An internal issue number as a reader would see it: "issue 11", "Issues 11-15", "(issue #15)".
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def user_text_files() -> list[Path]:
    return [REPO / "README.md", REPO / "mkdocs.yml", *pages()]


def prose(path: Path) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """The anchor MkDocs' toc extension gives a heading (Python-Markdown's default slugify)."""
    text = re.sub(r"`|\*\*|\[|\]\([^)]*\)", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#").strip()) for _, line in prose(path) if re.match(r"#{1,6} ", line)}


def nav_files(nav) -> list[str]:
    """Every page file named in mkdocs.yml's nav, in order."""
    out: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            out += nav_files(value)
        elif not re.match(r"[a-z]+://", value):
            out.append(value)
    return out


def mkdocs_config() -> dict:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def test_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): "
                                            "move the detail to a page under docs/")


def test_no_user_text_names_an_internal_issue_number():
    hits = [f"{p.relative_to(REPO)}:{n}: {m.group(0)}" for p in user_text_files()
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            for m in ISSUE_NUMBER.finditer(line)]
    assert not hits, "README/docs name internal issue numbers (keep the facts, drop the numbers):\n" + "\n".join(hits)


def test_the_issue_number_check_catches_the_usual_forms():
    for text in ("## Baselines (issue 4)", "Issues 11-15: fidelity", "fixed in issue #15", "see issues 12"):
        assert ISSUE_NUMBER.search(text), text
    for text in ("snap-research/locomo#29", "the issue is 4 tokens", "tissue 5"):
        assert not ISSUE_NUMBER.search(text), text


def test_every_nav_entry_exists_and_every_page_is_in_the_nav():
    cfg = mkdocs_config()
    assert cfg.get("docs_dir", "docs") == "docs" and cfg["theme"]["name"] == "material"
    listed = nav_files(cfg["nav"])
    missing = [f for f in listed if not (DOCS / f).is_file()]
    assert not missing, f"mkdocs.yml nav names pages that do not exist under docs/: {missing}"
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"
    unlisted = [str(p.relative_to(DOCS)) for p in pages() if str(p.relative_to(DOCS)) not in listed]
    assert not unlisted, f"pages under docs/ missing from mkdocs.yml nav: {unlisted}"


def test_the_home_page_names_every_page():
    """docs/index.md's table of pages is how a reader finds a page outside the site's menu."""
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]+)?\)", index.split("## The pages", 1)[1]))
    missing = [str(p.relative_to(DOCS)) for p in pages() if p.name != "index.md" and p.name not in linked]
    assert not missing, f"docs/index.md's table of pages leaves out: {missing}"


def test_the_memory_systems_page_lists_every_registered_system():
    from common.systems.registry import REGISTERED

    first = (DOCS / "memory-systems.md").read_text(encoding="utf-8").split("\n\n")[1]
    named = set(re.findall(r"`([a-z0-9_]+)`", first))
    assert set(REGISTERED) <= named, f"not in memory-systems.md's list: {sorted(set(REGISTERED) - named)}"


def link_targets() -> list[tuple[Path, int, str]]:
    return [(p, n, m.group(1)) for p in [REPO / "README.md", *pages()] for n, line in prose(p)
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line))]


def test_every_relative_link_in_readme_and_docs_resolves():
    assert link_targets(), "no links found: the link pattern is broken"
    bad = []
    for page, n, target in link_targets():
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        where = f"{page.relative_to(REPO)}:{n}: {target}"
        if not dest.exists():
            bad.append(f"{where} (no such file)")
        elif page.is_relative_to(DOCS) and not dest.is_relative_to(DOCS):
            bad.append(f"{where} (outside docs/: the site cannot serve it; name the file in `code`)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{where} (no heading with anchor #{anchor} in {dest.name})")
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_the_link_check_sees_a_broken_link_and_a_broken_anchor(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\n## Real heading\n", encoding="utf-8")
    (docs / "b.md").write_text("[ok](a.md#real-heading) [gone](nope.md) [anchor](a.md#no-such)\n"
                               "```\n[in code](ignored.md)\n```\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("[up](docs/a.md)\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "DOCS", docs)
    with pytest.raises(AssertionError) as err:
        test_every_relative_link_in_readme_and_docs_resolves()
    assert "nope.md (no such file)" in str(err.value) and "#no-such" in str(err.value)
    assert "ignored.md" not in str(err.value) and "a.md#real-heading" not in str(err.value)


def test_make_docs_builds_strictly_into_site():
    out = subprocess.run(["make", "-s", "-n", "docs", f"PY={sys.executable}"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "mkdocs build --strict" in out.stdout and "site" in out.stdout
    assert "make docs" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "site/" in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
