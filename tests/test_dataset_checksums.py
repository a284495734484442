"""A benchmark file other than the official release runs, but is marked "modified dataset" with both hashes."""
from __future__ import annotations

import hashlib
import re
import subprocess

from common.benchmarks import checksums
from common.benchmarks.registry import ADAPTERS
from tests.conftest import REPO, TINY_LOCOMO


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_makefile_and_the_adapters_read_one_checksum_list():
    out = subprocess.run(["make", "-s", "-p", "-n", "-f", "Makefile", "help"], cwd=REPO, capture_output=True,
                         text=True, timeout=60).stdout
    made = dict(re.findall(r"^(LOCOMO_SHA256|LME_SHA256_\w+) :?= ([0-9a-f]{64})$", out, re.M))
    assert made["LOCOMO_SHA256"] == ADAPTERS["locomo"].official_sha256 == checksums.official("locomo10.json")
    lme = ADAPTERS["longmemeval"].official_sha256
    assert {f"LME_SHA256_{k.removesuffix('.json')}": v for k, v in lme.items()} == \
        {k: v for k, v in made.items() if k.startswith("LME_")}
    assert len(made) == 4


def test_a_file_that_differs_from_the_release_is_modified_with_both_hashes(tmp_path):
    official = tmp_path / "locomo10.json"
    official.write_bytes(b"[1]")
    assert checksums.check(_sha(b"[1]"), official)["status"] == "official"
    got = checksums.check(ADAPTERS["locomo"].official_sha256, TINY_LOCOMO)
    assert got["status"] == "modified" and got["sha256"] == _sha(TINY_LOCOMO.read_bytes())
    assert got["warning"] == (f"MODIFIED DATASET: sha256 {got['sha256']} differs from the official release's "
                              f"{checksums.official('locomo10.json')}")
    # Several released files: a file is held against the entry of its own name, or any of them.
    files = {"a.json": _sha(b"A"), "b.json": _sha(b"B")}
    (tmp_path / "b.json").write_bytes(b"B")
    (tmp_path / "renamed.json").write_bytes(b"A")
    (tmp_path / "a.json").write_bytes(b"B")
    assert checksums.check(files, tmp_path / "b.json")["status"] == "official"
    assert checksums.check(files, tmp_path / "renamed.json")["status"] == "official"
    wrong = checksums.check(files, tmp_path / "a.json")
    assert wrong["status"] == "modified" and wrong["official_sha256"] == files["a.json"]


def test_a_release_of_several_files_is_checked_file_by_file_in_its_directory(tmp_path):
    (tmp_path / "one.json").write_bytes(b"1")
    (tmp_path / "two.json").write_bytes(b"2")
    files = {"one.json": _sha(b"1"), "two.json": _sha(b"2")}
    assert checksums.check(files, tmp_path)["status"] == "official"
    (tmp_path / "two.json").write_bytes(b"2, edited")
    got = checksums.check(files, tmp_path)
    assert got["status"] == "modified" and got["warning"] == (
        f"MODIFIED DATASET: two.json sha256 {_sha(b'2, edited')} differs from the official release's "
        f"{files['two.json']}")
    assert checksums.check("", TINY_LOCOMO)["status"] == "unknown"
