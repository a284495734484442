"""Protocol cards and what ran (common/systems/cards.py, identity.py, card_docs.py): every outside
system carries a card that parses; a card's declared search settings agree with what its adapter
resolves under each protocol (checked here for the in-process systems, and at every run for all);
docs/memory-systems.md renders the cards as they are; and every run says what ran (protocol,
version, departures for that protocol linked to the card, embedding model) in 06's manifest,
metrics.json, the line under its score table, the systems table (native beside common, with the
difference) and the report."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from common.core.config import load_config
from common.evaluation.labels import load_labels
from common.evaluation.stats import pair_labels
from common.systems import card_docs, cards, envs, identity, registry
from common.systems.base import Context
from tests.conftest import REPO, TINY_LOCOMO, run_overrides, run_stages
from tests.test_process_systems import FIXTURES, child_env  # noqa: F401 - the module's fixture
from tests.test_system_protocols import CARD

IN_PROCESS = [n for n in registry.REGISTERED if registry.system_class(n).outside]


def outside_systems() -> list[str]:
    """Every outside system: the registered in-process ones and every folder of systems/."""
    assert not os.environ.get("HARNESS_SYSTEMS_ROOT"), "the real systems/ folder, not a test's"
    return IN_PROCESS + envs.names()


def test_the_outside_systems_are_the_ones_the_issue_names():
    assert IN_PROCESS == ["mem0", "amem", "langmem", "graphiti", "simplemem"]


def test_every_outside_system_has_a_card_that_parses():
    missing, broken = [], []
    for name in outside_systems():
        try:
            if cards.load(name) is None:
                missing.append(f"{name} ({cards.relative(cards.card_path(name))})")
        except ValueError as exc:  # ConfigError: one line naming the file and the field
            broken.append(str(exc))
    assert not missing and not broken, f"no card: {missing}; broken: {broken}"


@pytest.mark.parametrize("name", IN_PROCESS)
@pytest.mark.parametrize("protocol", cards.PROTOCOLS)
def test_an_in_process_card_agrees_with_what_its_adapter_resolves(name, protocol, tmp_path):
    card = cards.load(name)
    if card is None:
        pytest.skip(f"{name} has no card yet (test_every_outside_system_has_a_card_that_parses fails for it)")
    cfg = load_config(["configs/locomo.yaml"], [f"method.name={name}", f"systems.protocol={protocol}"])
    system = registry.system_class(name)(Context(cfg, tmp_path, tmp_path / "state", lambda: None))
    check = cards.check(card, protocol, system.search_settings() or {})
    assert not check.mismatches, f"{card.source} disagrees with {name} under {protocol}: {check.mismatches}"
    assert identity.installed_version(card, in_process=True) == card.version, "the card's version is not installed"


def _card(**changes):
    return cards.parse({**CARD, **changes}, "demo.yaml")


def test_a_card_that_says_otherwise_than_its_adapter_is_caught():
    card = _card(search={"common": {"k": 10, "settings": {"top_k": 10, "mode": "fast"}},
                         "native": {"k": 30, "mode": "fast", "settings": {"rerank": True}}})
    good = cards.check(card, "common", {"top_k": 10, "mode": "FAST", "window": 40})
    assert good.checked == {"top_k": 10, "mode": "fast"} and not good.mismatches
    # the adapter runs 10 where the native card says 30 (through its only k-like setting), and never reports rerank
    bad = cards.check(card, "native", {"top_k": 10, "mode": "fast"})
    assert bad.mismatches == ("rerank: card True, not reported by the adapter", "k: card 30, adapter top_k 10")
    assert not cards.check(card, "common", {"top_k": 10, "mode": "fast", "limit": 5}).mismatches  # top_k named
    assert cards.check(card, "native", {"k": 30, "limit": 5, "rerank": True}).checked == {"rerank": True}
    wordy = _card(search={"common": {"k": "10 per speaker"}, "native": {"k": 30}})
    assert cards.check(wordy, "common", {"top_k": 20}).checked == {}  # a k in words is not compared


def test_the_docs_page_renders_the_cards_as_they_are():
    assert card_docs.page_block() == card_docs.render(), "docs/memory-systems.md is stale: run `make system-cards`"


def test_a_rendered_card_shows_its_reference_and_every_departure_with_its_protocols(monkeypatch):
    monkeypatch.setenv("HARNESS_SYSTEMS_ROOT", str(FIXTURES))
    text = card_docs.render(["stdlib_turns"])
    assert "[stdlib_turns](#card-stdlib_turns) | example/stdlib-turns @ `0123abc` | 0.1 | 2 | 1 |" in text
    assert "### Card: stdlib_turns" in text and "`tests/fixtures/systems/stdlib_turns/card.yaml`" in text
    assert "| `local-embeddings` | the harness's embedding model instead of text-embedding-3-small" in text
    assert "| `harness-prompt` | the harness's answer prompt | the common protocol answers every system alike | " \
           "common |" in text
    assert "| search | | call: cosine over turns, k: 10, settings: {ranking: cosine} |" in text


# ---------------------------------------------------------------------------- what ran, end to end
@pytest.fixture(scope="module")
def both_protocols(child_env):  # noqa: F811
    """The tests' adapter in its own process, with its card, through 01-09 under each protocol."""
    from tests.fake_openai import FakeOpenAI

    tmp = child_env["tmp"] / "cards"
    out = {"tmp": tmp}
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        for protocol in cards.PROTOCOLS:
            sets = run_overrides(tmp, TINY_LOCOMO, **{
                "method.name": "stdlib_turns", "embedding.backend": "openai", "embedding.model": "fake-embed",
                "embedding.base_url": fake.base_url, "run.name": protocol, "systems.protocol": protocol,
                "data.memories": "[tiny-1]", "method.options": json.dumps({"answers": True})})
            out[protocol] = run_stages("configs/locomo.yaml", sets)
        # the same system told to rank otherwise, and to keep 5: its card (cosine, k 10) no longer says what runs
        sets = run_overrides(tmp, TINY_LOCOMO, **{
            "method.name": "stdlib_turns", "embedding.backend": "openai", "embedding.model": "fake-embed",
            "embedding.base_url": fake.base_url, "run.name": "lying", "data.question_limit": 1,
            "method.options": json.dumps({"ranking": "bm25", "limit": 5})})
        out["lying"] = run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve"])
    yield out


def test_every_run_records_what_ran(both_protocols):
    for protocol, departures in (("common", 2), ("native", 1)):
        metrics = json.loads(both_protocols[protocol].path("metrics").read_text())
        ran = metrics["system"]
        assert (ran["name"], ran["protocol"], ran["version"], ran["departures"]) == \
            ("stdlib_turns", protocol, "0.1", departures)
        assert ran["card"] == "tests/fixtures/systems/stdlib_turns/card.yaml" and (REPO / ran["card"]).is_file()
        assert ran["card_check"] == {"checked": {"ranking": "cosine", "k": 10}, "mismatches": []}
        assert ran["reference_embedding"] == "text-embedding-3-small"
        assert metrics["embedding"]["label"] == "fake-embed (an /v1/embeddings server's own limit)"
        assert metrics["embedding"]["over_limit"] is None  # the server's limit: not counted, and said so
        from common.evaluation.scoring import score_note

        assert (f"Memory system: stdlib_turns 0.1, protocol {protocol}, {departures} departure"
                f"{'s' if departures != 1 else ''} from its reference (tests/fixtures/systems/stdlib_turns/card.yaml)"
                in score_note(metrics, "gpt-4o-mini"))


def test_a_card_that_no_longer_says_what_runs_is_said_so(both_protocols):
    ran = identity.recorded(both_protocols["lying"].dir)
    assert ran["card_check"]["mismatches"] == ["ranking: card 'cosine', adapter 'bm25'", "k: card 10, adapter limit 5"]
    assert "card disagrees: ranking: card 'cosine', adapter 'bm25'; k: card 10, adapter limit 5" in identity.label(ran)


def test_the_systems_table_shows_native_beside_common_with_the_difference(both_protocols):
    from common.report import html
    from common.report.tables import command

    results = both_protocols["tmp"] / "results"
    out = results / "tables"
    assert command.main(["--results", str(results), "--out", str(out), "--only", "systems"]) == 0
    table = (out / "systems.md").read_text()
    head = [c.strip() for c in next(x for x in table.splitlines() if x.startswith("| Ref")).split("|")]
    lines = {c[head.index("Run")]: c for c in ([x.strip() for x in line.split("|")]
                                                for line in table.splitlines() if line.startswith("| S"))}
    common, native = lines["common"], lines["native"]
    for line, protocol, departures in ((common, "common", 2), (native, "native", 1)):
        cell = dict(zip(head, line))
        assert cell["System protocol"] == protocol and cell["Version"] == "0.1"
        link = re.fullmatch(r"\[(\d+)\]\((.+)\)", cell["Departures"])
        assert link and int(link.group(1)) == departures
        assert (out / link.group(2)).resolve() == REPO / "tests/fixtures/systems/stdlib_turns/card.yaml"
        assert cell["Embedding model"].startswith("fake-embed")
    # native - common on both rows: the paired difference of strict accuracy, recounted here
    a = load_labels(both_protocols["common"].dir, "gpt-4o-mini").by_qid()
    b = load_labels(both_protocols["native"].dir, "gpt-4o-mini").by_qid()
    pairs = pair_labels(a, b, "strict")
    diff = 100 * (sum(pairs.b) - sum(pairs.a)) / len(pairs.qids)
    for line in (common, native):
        cell = dict(zip(head, line))["Native - common"]
        assert f"{diff:+.1f} pp [" in cell and cell.endswith(f"over {len(pairs.qids)} shared questions")
    assert dict(zip(head, common))["Native - common"].startswith(dict(zip(head, native))["Ref"] + " (native)")
    csv = (out / "systems.csv").read_text()
    assert "](" not in csv  # the link is the Markdown's; the CSV keeps the number
    page = html.build(both_protocols["native"].dir, out=both_protocols["tmp"] / "report.html").read_text()
    ident = page.split('id="system-identity"', 1)[1].split("</table>", 1)[0]
    assert 'id="system-protocol">native<' in ident and 'id="system-version">0.1<' in ident
    assert "1 from its reference evaluation (<code>tests/fixtures/systems/stdlib_turns/card.yaml</code>" in ident


def test_a_run_made_before_identities_were_recorded_still_gets_a_row(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    (run / "config.resolved.yaml").write_text("method:\n  name: mem0\nsystems:\n  protocol: native\n", encoding="utf-8")
    ran = identity.of_run(run)
    assert (ran["name"], ran["protocol"], ran["version"], ran["departures"]) == ("mem0", "native", "", None)
    assert identity.label(ran) == "mem0 (version not recorded), protocol native, no protocol card"


def test_card_paths_are_written_from_the_project_root():
    assert cards.relative(REPO / "systems" / "letta" / "card.yaml") == "systems/letta/card.yaml"
    assert cards.relative(Path("/elsewhere/card.yaml")) == "/elsewhere/card.yaml"


def test_on_ray_the_memories_manifests_keep_one_identity_not_a_sum_of_departures():
    from common.pipeline import ray_executor

    ran = {"name": "letta", "protocol": "native", "version": "0.16.8", "departures": 2,
           "card": "systems/letta/card.yaml"}
    merged = ray_executor._merge_extra([{"system": ran, "new_rows": 1}, {"system": dict(ran), "new_rows": 2}])
    assert merged["system"] == ran and merged["new_rows"] == 3


def test_a_childs_own_depth_wins_over_the_limit_it_is_sent(tmp_path):
    from common.systems import process

    cfg = load_config(["configs/locomo.yaml"], ["systems.protocol=native"])
    child = process.process_class("demo")(Context(cfg, tmp_path, tmp_path / "state", lambda: None))
    assert child.search_settings() is None and child.version() is None  # no hello yet: nothing to check
    child.hello = {"version": "2.0.33", "settings": {"top_k": 20, "mode": "fast"}}
    assert child.search_settings() == {"top_k": 20, "mode": "fast"} and child.version() == "2.0.33"
    child.hello = {"version": "1", "settings": {"mode": "fast"}}
    assert child.search_settings() == {"limit": 10, "mode": "fast"}
