"""The protocol cards rendered in docs/memory-systems.md, generated from the card files.

    python -m common.systems.card_docs            # print the rendered block
    python -m common.systems.card_docs --write    # what `make system-cards` runs: rewrite the page's block
    python -m common.systems.card_docs --check    # exit 1 when the page's block is not the cards' rendering

The block sits between ``<!-- cards:start -->`` and ``<!-- cards:end -->``; ``tests/test_system_cards.py``
requires it to be exactly this rendering of the cards that exist, so the page cannot drift from them.
Each card gets a section ``Card: <name>`` (anchor ``card-<name>``), the systems table's departures link
to the card file itself.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from common.systems import cards, envs

PAGE = envs.REPO / "docs" / "memory-systems.md"
START, END = "<!-- cards:start -->", "<!-- cards:end -->"


def _cell(value: Any) -> str:
    text = ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) if isinstance(value, dict) else _plain(value)
    return text.replace("|", "\\|")


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_plain(v) for v in value)
    return " ".join(str(value).split())


def render_card(card: cards.Card) -> str:
    ref = card.reference
    what = f" ({_plain(ref.what)})" if ref.what else ""
    lines = [f"### Card: {card.system}", "",
             f"{_plain(card.title)}: `{card.package}` (version {card.version}); the card: "
             f"`{cards.relative(card.source)}`.",
             f"Reference: {ref.repository} @ `{ref.commit}`, `{ref.path}`{what}.", "",
             "| | the reference | here, common | here, native |", "|---|---|---|---|"]
    for key in cards.INGEST_FIELDS:
        lines.append(f"| ingest: {key} | {_cell(card.ingest[key])} | | |")
    lines.append(f"| search | | {_cell(card.search.get('common'))} | {_cell(card.search.get('native'))} |")
    lines.append(f"| rendering | {_cell(card.rendering)} | | |")
    lines.append(f"| answer | {_cell(card.answer['reference'])} | {_cell(card.answer['common'])} "
                 f"| {_cell(card.answer['native'])} |")
    lines.append(f"| embedding | {_cell(card.embedding['reference'])} | {_cell(card.embedding['harness'])} "
                 f"| {_cell(card.embedding['harness'])} |")
    lines.append("")
    if card.departures:
        lines += ["| departure | what | why | protocols |", "|---|---|---|---|"]
        lines += [f"| `{d.id}` | {_cell(d.what)} | {_cell(d.why)} | {', '.join(d.protocols)} |"
                  for d in card.departures]
    else:
        lines.append("No departure.")
    return "\n".join(lines)


def render(names: Optional[list[str]] = None) -> str:
    """The page's block: a summary table of every card, then each card."""
    loaded = [c for c in (cards.load(n) for n in (names if names is not None else cards.all_names())) if c]
    if not loaded:
        return "No system carries a protocol card yet."
    head = ["| system | reference | version | departures, common | departures, native |", "|---|---|---|---|---|"]
    head += [f"| [{c.system}](#card-{c.system.lower()}) | {c.reference.repository} @ `{c.reference.commit}` "
             f"| {c.version} | {len(c.departures_for('common'))} | {len(c.departures_for('native'))} |" for c in loaded]
    return "\n".join(head) + "\n\n" + "\n\n".join(render_card(c) for c in loaded)


def page_block(page: Path = PAGE) -> str:
    """What the page holds between the markers."""
    text = page.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise ValueError(f"{page}: no {START} ... {END} block for the protocol cards")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def write(page: Path = PAGE) -> bool:
    """Rewrite the page's block; whether it changed."""
    text = page.read_text(encoding="utf-8")
    page_block(page)  # the markers exist
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    new = f"{before}{START}\n{render()}\n{END}{after}"
    page.write_text(new, encoding="utf-8")
    return new != text


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m common.systems.card_docs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the block of {PAGE.name}")
    parser.add_argument("--check", action="store_true", help="exit 1 when the page's block is stale")
    args = parser.parse_args(argv)
    try:
        if args.write:
            print(f"{PAGE}: {'updated' if write() else 'already current'}")
        elif args.check:
            if page_block() != render():
                print(f"{PAGE}: the protocol cards' block is stale; run `make system-cards`", file=sys.stderr)
                return 1
            print(f"{PAGE}: current")
        else:
            print(render())
    except (ValueError, OSError) as exc:  # a broken card (ConfigError) or page: one line
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
