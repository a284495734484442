"""Rendering original turns into prompt text and the evidence buffer.

One line per turn, ``[<dia_id>] <speaker>: <text>``, with image metadata indented under the
turn that carried it, so captions never drift away from their DIA. The answer model reads
episodes rendered from the ORIGINAL turns (with session date and speaker), never from records.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common.core.schema import Episode, Session, Turn


def render_turn(turn: Turn, include_images: bool = True) -> str:
    # Assistant turns are labelled as such: single-session-assistant questions ask about them.
    speaker = turn.speaker
    if turn.role == "assistant" and "assistant" not in speaker.lower():
        speaker = f"{speaker} (assistant)"
    lines = [f"[{turn.dia_id}] {speaker}: {turn.text}"]
    if include_images:
        if turn.blip_caption:
            lines.append(f"    [image caption] {turn.blip_caption}")
        if turn.query:
            lines.append(f"    [image retrieval query] {turn.query}")
        for url in turn.img_url:
            lines.append(f"    [image url] {url}")
    return "\n".join(lines)


def render_turns(turns: list[Turn], include_images: bool = True) -> str:
    return "\n".join(render_turn(t, include_images) for t in turns)


@dataclass
class MemoryView:
    """The sessions of one memory with turn lookup by DIA id and global turn order."""

    memory_id: str
    sessions: list[Session]
    turns: dict[str, Turn] = field(default_factory=dict)
    position: dict[str, tuple[int, int]] = field(default_factory=dict)  # dia -> (session, turn)
    session_of: dict[str, Session] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for s in self.sessions:
            for i, t in enumerate(s.turns):
                self.turns[t.dia_id] = t
                self.position[t.dia_id] = (s.session_index, i)
                self.session_of[t.dia_id] = s

    def episode_turns(self, episode: Episode) -> list[Turn]:
        return [self.turns[d] for d in episode.dia_ids]

    def episode_text(self, episode: Episode, include_images: bool = True) -> str:
        return render_turns(self.episode_turns(episode), include_images)


def episode_header(episode: Episode) -> str:
    return (
        f"### Episode {episode.episode_id} | {episode.session_id} | "
        f"session date: {episode.date_time or 'unknown'}"
    )


def render_buffer(view: MemoryView, episodes: list[Episode], include_images: bool = True,
                  keep_order: bool = False) -> str:
    """The answer model's evidence: whole original episodes, in conversation order (or as given)."""
    ordered = episodes if keep_order else sorted(episodes, key=lambda e: view.position[e.dia_ids[0]])
    blocks = [episode_header(e) + "\n" + view.episode_text(e, include_images) for e in ordered]
    return "\n\n".join(blocks)
