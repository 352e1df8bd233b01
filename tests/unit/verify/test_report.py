"""The report: a table per joiner, the restarts, the broker, the verdict; and its JSON."""

from __future__ import annotations

import json

from rich.console import Console

from daemon.verify.check import JoinerCheck, Row
from daemon.verify.facts import BrokerFacts
from daemon.verify.kills import Kill
from daemon.verify.plan import VerifyOptions
from daemon.verify.report import as_json, show, verdict_line
from daemon.verify.run import VerifyReport


def report(rows: list[Row], leaked: dict[str, int] | None = None) -> VerifyReport:
    found = VerifyReport(
        run="r1",
        prefix="enrichd-verify",
        broker=BrokerFacts("127.0.0.1:9092", "c", 1),
        options=VerifyOptions(joiners=("comap",), records=100, kills=1),
        checks=[
            JoinerCheck(
                "comap",
                rows=rows,
                dead_letters=[Row("UndecodableRecord", 3, 3)],
                broker_leaked=leaked or {},
            )
        ],
        kills=[Kill(1, 12.5, 4, 60, 0.0, 20.1)],
        starts=2,
        stop_exit_code=0,
        input_records=120,
        input_at_start=50,
        output_records=90,
        run_s=60.0,
        raw_batches="read: every record's transaction known",
    )
    return found


def rendered(found: VerifyReport) -> str:
    console = Console(record=True, width=400)
    show(found, console)
    return console.export_text()


def test_a_passing_report_shows_each_scenario_and_the_brokers_fault_apart() -> None:
    found = report([Row("tweet joins its user", 87, 87)], leaked={"p.comap.out": 2})
    assert found.ok and found.exit_code == 0
    text = rendered(found)
    assert "tweet joins its user" in text and "dead letter: UndecodableRecord" in text
    assert "aborted records read_committed got (p.comap.out)" in text and "broker's fault" in text
    assert (
        "rates: 120 input records in 60 s including 1 kill(s) and 2 start(s): 2 records/s" in text
    )
    assert "input: 50 record(s) produced before daemon run started, 70 while it ran" in text
    assert text.rstrip().endswith(
        "PASS: exactly once through 1 kill -9(s): nothing lost, nothing duplicated; the broker "
        "handed 2 aborted record(s) to read_committed readers (its fault, not enrichd's: see above)"
    )


def test_a_loss_fails_with_exit_code_3_and_the_json_says_where() -> None:
    found = report([Row("tweet joins its user", 87, 86, lost=1)])
    assert not found.ok and found.exit_code == 3
    assert verdict_line(found).startswith("FAIL")
    document = json.loads(json.dumps(as_json(found)))
    assert document["verdict"] == "fail" and document["exit_code"] == 3
    assert document["joiners"]["comap"]["scenarios"] == [
        {
            "scenario": "tweet joins its user",
            "expected": 87,
            "observed": 86,
            "lost": 1,
            "duplicated": 0,
            "unexpected": 0,
            "verdict": "lost 1",
        }
    ]
    assert document["restarts"][0]["recovered_s"] == 20.1
    assert document["rates"]["records_per_second"] == 2.0
    assert "lost 1" in rendered(found)


def test_a_reader_held_short_of_the_end_fails_the_run() -> None:
    found = report([Row("tweet joins its user", 1, 1)])
    found.held = ["p.out/0: no progress past offset 5 in 30 s, short of offset 9"]
    assert found.exit_code == 3
    assert "held: p.out/0: no progress past offset 5" in rendered(found)


def test_the_report_says_whether_the_replay_path_ran() -> None:
    found = report([Row("tweet joins its user", 87, 87)])
    assert (
        "replays: NO replayed task found its batch committed: the kills landed where no "
        "task had committed, so this run did not prove the replay path (run it again)"
        in (rendered(found))
    )
    found.replays_found = 3
    text = rendered(found)
    assert (
        "replays: 3 replayed task(s) found their batch committed by its marker and wrote "
        "nothing again: the replay path ran" in text
    )
    assert as_json(found)["replays_found"] == 3
    assert found.ok  # a fact about the run, never a failure


def test_the_settings_warnings_are_shown_and_do_not_fail_the_run() -> None:
    found = report([Row("tweet joins its user", 87, 87)])
    found.settings = ["min.insync.replicas is 1 on topic out: set it to 2"]
    assert "WARNING settings: min.insync.replicas is 1 on topic out: set it to 2" in (
        rendered(found)
    )
    assert as_json(found)["settings_warnings"] == found.settings and found.ok


def test_the_zombie_line_says_where_the_run_was_stopped_and_what_it_did_once_woken() -> None:
    from daemon.verify.zombie import Zombie

    found = report([Row("tweet joins its user", 87, 87)])
    found.zombie = Zombie(4, True, 5, 0, 2, "was killed by verify once it committed the batch")
    assert (
        "zombie: daemon run stopped (SIGSTOP) at micro-batch 4 (while its tasks ran); a new run "
        "committed up to 5; once resumed, 0 line(s) of its logs said a transaction was fenced, "
        "2 of its tasks found their batch committed, and it was killed by verify once it "
        "committed the batch" in rendered(found)
    )
    assert as_json(found)["zombie"]["replays_found"] == 2
