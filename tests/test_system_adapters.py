"""What two adapters of ``systems/`` hand their system, checked without the system: MemoryOS's
question/answer pages and Hindsight's retain items, built from a memory's sessions as those
systems' own LoCoMo evaluations build them. The adapters are loaded in a child interpreter (their
module sets the child's environment switches, which must not leak into this test process); only
their standard-library helpers run, so this is fast and needs no system environment."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SESSIONS = [
    {"session_id": "session_1", "date": "1:56 pm on 8 May, 2023", "turns": [
        {"turn_id": "D1:1", "speaker": "Ann", "text": "Hi Bo!"},
        {"turn_id": "D1:2", "speaker": "Bo", "text": "Hey Ann."},
        {"turn_id": "D1:3", "speaker": "Ann", "text": "I went hiking."},
    ]},
    {"session_id": "session_2", "date": "10:00 am on 9 June, 2023", "turns": [
        {"turn_id": "D2:1", "speaker": "Bo", "text": "How was the hike?"},
        {"turn_id": "D2:2", "speaker": "Ann", "text": "Steep."},
        {"turn_id": "D2:3", "speaker": "Bo", "text": "Oh."},
        {"turn_id": "D2:4", "speaker": "Bo", "text": "Rest well."},
    ]},
]

PROGRAM = r'''
import importlib.util, json, sys
def load(name):
    spec = importlib.util.spec_from_file_location(name + "_adapter", f"systems/{name}/adapter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
sessions = json.loads(sys.stdin.read())
print(json.dumps({"memoryos": load("memoryos").pages_of(sessions),
                  "hindsight": load("hindsight").items_for("conv-1", sessions)}, default=str))
'''


def built() -> dict:
    out = subprocess.run([sys.executable, "-c", PROGRAM], input=json.dumps(SESSIONS), capture_output=True,
                         text=True, cwd=ROOT, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict = json.loads(out.stdout)
    return result


def test_memoryos_pages_pair_speaker_a_with_the_next_turn_of_speaker_b():
    pages = built()["memoryos"]
    assert [(p["user_input"], p["agent_response"], p["timestamp"]) for p in pages] == [
        ("Hi Bo!", "Hey Ann.", "1:56 pm on 8 May, 2023"),
        # A page opened by speaker A keeps the answer that follows it, across a session boundary,
        # as the evaluation's flattened turn list does.
        ("I went hiking.", "How was the hike?", "1:56 pm on 8 May, 2023"),
        # Two turns of speaker B in a row: the later one is the answer (the evaluation overwrites).
        ("Steep.", "Rest well.", "10:00 am on 9 June, 2023"),
    ]


def test_hindsight_retains_one_item_per_session_with_its_date_and_turn_ids():
    items = built()["hindsight"]
    assert [i["document_id"] for i in items] == ["conv-1_session_1", "conv-1_session_2"]
    assert items[0]["context"] == "Conversation between Ann and Bo (session_1 of conv-1)"
    assert items[0]["event_date"].startswith("2023-05-08 13:56:00")
    assert items[1]["event_date"].startswith("2023-06-09 10:00:00")
    turns = json.loads(items[1]["content"])
    assert turns == [{"speaker": "Bo", "dia_id": "D2:1", "text": "How was the hike?"},
                     {"speaker": "Ann", "dia_id": "D2:2", "text": "Steep."},
                     {"speaker": "Bo", "dia_id": "D2:3", "text": "Oh."},
                     {"speaker": "Bo", "dia_id": "D2:4", "text": "Rest well."}]
