"""results.json as a versioned contract: today's files round-trip, older files upgrade, and an
unknown key or a newer version is refused with a message that names it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specwatch.records import RESULTS_SCHEMA_VERSION, CellKey
from specwatch.store.db import connect
from specwatch.store.ingest import ingest, load
from specwatch.store.rundir import RESULTS_FILE, RunDirError, read_raw, write_raw
from specwatch_testing import records as rf

# Written by specwatch before the cell key and schema_version existed (commit 3f12590): two
# arms, 8 cells, a rejected cell and one quality row.
V1 = Path(__file__).parent / "data" / "results-v1.json"


def test_a_file_written_before_schema_version_upgrades(tmp_path: Path) -> None:
    assert "schema_version" not in json.loads(V1.read_text())
    shutil.copy(V1, tmp_path / RESULTS_FILE)
    result = read_raw(tmp_path)
    assert result.schema_version == RESULTS_SCHEMA_VERSION
    cells = [c for a in result.arms for c in a.cells]
    assert len(cells) == 8 and [c.load_mode for c in cells] == ["closed"] * 8
    assert cells[4].key == CellKey(concurrency=1, prompt_class="code", prompt_tokens=128) and cells[4].rejected
    assert result.quality[0].cell == "closed/c1/code/p128"
    # derived figures are recomputed, not read back
    assert cells[0].decode_tok_s_median == pytest.approx(32.0)
    # and the upgraded run goes into DuckDB keyed by its cells
    db = tmp_path / "h.duckdb"
    ingest(result, db)
    con = connect(db)
    try:
        assert con.execute("select count(distinct cell) from cells").fetchone() == (4,)
        assert load(con, result.run_id).arms[1].cells[0].rejected
    finally:
        con.close()


# Written by main's code at 55b2786 (schema v2: no request ids, ITL, SLO or KV-cache figures).
V2 = Path(__file__).parent / "data" / "results-v2.json"


def test_a_v2_file_upgrades_to_v3_with_the_new_figures_unknown(tmp_path: Path) -> None:
    doc = json.loads(V2.read_text())
    assert doc["schema_version"] == 2 and "request_id" not in doc["arms"][0]["cells"][0]["requests"][0]
    shutil.copy(V2, tmp_path / RESULTS_FILE)
    result = read_raw(tmp_path)
    assert result.schema_version == RESULTS_SCHEMA_VERSION == 5
    cell = result.arms[0].cells[0]
    assert cell.decode_tok_s_median == pytest.approx(doc["arms"][0]["cells"][0]["decode_tok_s_median"])
    # never measured in v2: unknown, not zero
    assert cell.requests[0].request_id is None and cell.requests[0].itl_hist is None
    assert cell.itl_ms_p50 is None and cell.goodput_share is None and cell.window.preemptions is None
    assert cell.kv_cache_usage_peak is None and result.arms[0].launch.kv_cache_tokens is None
    assert cell.ttft_ms_p50 == pytest.approx(50.0)  # recomputed from the v2 samples
    db = tmp_path / "h.duckdb"
    ingest(result, db)
    con = connect(db)
    try:
        assert load(con, result.run_id) == result
    finally:
        con.close()


def test_todays_file_round_trips(tmp_path: Path) -> None:
    result = rf.run()
    write_raw(result, tmp_path)
    doc = json.loads((tmp_path / RESULTS_FILE).read_text())
    assert doc["schema_version"] == RESULTS_SCHEMA_VERSION
    assert doc["arms"][0]["cells"][0]["cell"] == "closed/c1/code/p128"  # derived keys are written for readers
    assert read_raw(tmp_path) == result


def test_a_v3_file_upgrades_with_its_outputs_unhashed(tmp_path: Path) -> None:
    write_raw(rf.run(), tmp_path)
    path = tmp_path / RESULTS_FILE
    doc = json.loads(path.read_text())
    for arm in doc["arms"]:
        for cell in arm["cells"]:
            for request in cell["requests"]:
                del request["output_sha256"]
    path.write_text(json.dumps({**doc, "schema_version": 3}))
    result = read_raw(tmp_path)
    assert result.schema_version == RESULTS_SCHEMA_VERSION
    assert {r.output_sha256 for a in result.arms for c in a.cells for r in c.requests} == {None}


def test_a_v4_file_with_blocks_reads_them_as_rounds(tmp_path: Path) -> None:
    """Before issue 22 a launch's round was its `block`, in the launches, the quality rows and the recorded
    experiment's design: a resume or an ingest of such a run reads them as rounds."""
    from specwatch.records import QualityRecord
    from specwatch.spec import parse_stored

    today = rf.run()
    today.arms[1] = today.arms[1].model_copy(update={"round": 2})
    today.quality = [QualityRecord(arm="k5", round=2, check="c", metric="m", passed=True, severity="regression"),
                     QualityRecord(arm="k5", round=None, check="c", metric="m", passed=True, severity="regression")]
    write_raw(today, tmp_path)
    path = tmp_path / RESULTS_FILE
    doc = json.loads(path.read_text())
    for row in (*doc["arms"], *doc["quality"]):
        row["block"] = row.pop("round")
    doc["experiment"]["design"] = {"blocks": 3, "max_blocks": 5, "adaptive": True}
    path.write_text(json.dumps({**doc, "schema_version": 4}))
    result = read_raw(tmp_path)
    assert result.schema_version == RESULTS_SCHEMA_VERSION
    assert [a.round for a in result.arms] == [1, 2] and [q.round for q in result.quality] == [2, None]
    assert result.experiment["design"] == {"rounds": 3, "max_rounds": 5, "adaptive": True}
    design = parse_stored({**result.experiment, "name": "x", "model": {"path": str(tmp_path)},
                           "images": [{"name": "cpu"}], "arms": [{"name": "a", "image": "cpu"}],
                           "baseline": "a"}).design
    assert (design.rounds, design.max_rounds) == (3, 5)
    assert result.model_dump(exclude={"experiment"}) == today.model_dump(exclude={"experiment"})


def test_output_hashes_round_trip_through_the_database(tmp_path: Path) -> None:
    result = rf.run()
    requests = result.arms[0].cells[0].requests
    requests[0] = requests[0].model_copy(update={"output_sha256": "0123456789abcdef"})
    ingest(result, tmp_path / "h.duckdb")
    con = connect(tmp_path / "h.duckdb")
    try:
        assert load(con, result.run_id) == result
    finally:
        con.close()


def test_an_unknown_key_is_refused_and_named(tmp_path: Path) -> None:
    write_raw(rf.run(), tmp_path)
    path = tmp_path / RESULTS_FILE
    doc = json.loads(path.read_text())
    doc["arms"][1]["cells"][2]["decode_tok_per_s"] = 1.0  # a misspelt field
    path.write_text(json.dumps(doc))
    with pytest.raises(RunDirError, match=r"arms\[1\]\.cells\[2\]\.decode_tok_per_s: unknown key for schema_version 5"):
        read_raw(tmp_path)


def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    write_raw(rf.run(), tmp_path)
    path = tmp_path / RESULTS_FILE
    doc = json.loads(path.read_text())
    doc["schema_version"] = RESULTS_SCHEMA_VERSION + 1
    path.write_text(json.dumps(doc))
    with pytest.raises(RunDirError, match="newer than this specwatch reads"):
        read_raw(tmp_path)


def test_a_file_that_is_not_json_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / RESULTS_FILE).write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    with pytest.raises(RunDirError, match="is not JSON"):
        read_raw(tmp_path)
