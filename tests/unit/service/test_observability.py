"""Metrics from Spark's progress reports and the sink's counts; readiness and stalls."""

from __future__ import annotations

import json
import os
import platform

from prometheus_client import generate_latest

from daemon.model.reports import BatchCounts
from daemon.service.observability import Health, Metrics, PipelineView, records_read

VIEW = PipelineView(
    name="views",
    inputs={"users": "one", "tweets": "many"},
    outputs={"tweet-views": "output", "views-per-author": "totals"},
    dead_letter_topic="views.dlq",
)


def progress(start: dict[str, int] | None, end: dict[str, int], **extra: object) -> dict:
    """A report trimmed to the fields read, in the shape StreamingQueryProgress.json has."""
    return {
        "name": "views",
        "batchId": 1,
        "numInputRows": 0,
        "durationMs": {"triggerExecution": 1500, "addBatch": 1200},
        "stateOperators": [{"operatorName": "transformWithStateInPySparkExec", "numRowsTotal": 7}],
        "sources": [
            {
                "startOffset": None if start is None else json.dumps(start),
                "endOffset": json.dumps(end),
                "latestOffset": None,
            }
        ],
        **extra,
    }


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_records_read_per_topic() -> None:
    start = {"users/0": 4, "users/1": 6, "tweets/0": 19, "tweets/1": 21}
    end = {"users/0": 4, "users/1": 6, "tweets/0": 46, "tweets/1": 44}
    assert records_read(start, end) == {"tweets": 50}
    assert records_read({}, {"a.b/c/0": 3}) == {}  # a partition without a start reads nothing


def test_a_batch_counts_records_in_per_input_state_rows_and_duration() -> None:
    metrics = Metrics()
    ends = metrics.batch_done(
        VIEW,
        progress({"users/0": 4, "tweets/0": 19}, {"users/0": 10, "tweets/0": 46, "tweets/1": 3}),
        first_offsets=lambda names: dict.fromkeys(names, 1),
    )
    assert ends == {"users/0": 10, "tweets/0": 46, "tweets/1": 3}
    assert sample(metrics, "enrichd_records_in_total", pipeline="views", input="one") == 6
    # tweets/1 had no start in the report: it counts from its first offset (1), not from 0
    assert sample(metrics, "enrichd_records_in_total", pipeline="views", input="many") == 29
    assert sample(metrics, "enrichd_state_rows", pipeline="views") == 7
    assert sample(metrics, "enrichd_batches_total", pipeline="views") == 1
    assert sample(metrics, "enrichd_batch_duration_seconds_sum", pipeline="views") == 1.5
    assert sample(metrics, "enrichd_batch_duration_seconds_bucket", pipeline="views", le="2.0") == 1
    assert sample(metrics, "enrichd_batch_duration_seconds_bucket", pipeline="views", le="1.0") == 0


def test_state_rows_spark_does_not_count_are_not_reported_as_zero() -> None:
    metrics = Metrics()
    metrics.state_rows_counted = False
    metrics.batch_done(
        VIEW,
        progress(
            {"users/0": 4},
            {"users/0": 10},
            stateOperators=[{"operatorName": "transformWithStateInPySparkExec", "numRowsTotal": 0}],
        ),
    )
    assert sample(metrics, "enrichd_state_rows", pipeline="views") is None
    assert sample(metrics, "enrichd_records_in_total", pipeline="views", input="one") == 6


def test_the_first_batch_of_a_new_checkpoint_counts_from_where_partitions_start() -> None:
    metrics = Metrics()
    metrics.batch_done(VIEW, progress(None, {"users/0": 10}), lambda names: {"users/0": 2})
    assert sample(metrics, "enrichd_records_in_total", pipeline="views", input="one") == 8


def test_committed_output_per_output_and_dead_letters_per_reason() -> None:
    metrics = Metrics()
    metrics.batch_written(
        VIEW,
        BatchCounts(
            "views",
            1,
            records={"tweet-views": 40, "views-per-author": 5, "views.dlq": 3},
            dead_letters={"UndecodableRecord": 2, "LateRecord": 1},
        ),
    )
    metrics.batch_written(VIEW, BatchCounts("views", 2, records={"tweet-views": 2}))
    assert sample(metrics, "enrichd_records_out_total", pipeline="views", output="output") == 42
    assert sample(metrics, "enrichd_records_out_total", pipeline="views", output="totals") == 5
    assert (
        sample(metrics, "enrichd_records_out_total", pipeline="views", output="views.dlq") is None
    )
    reasons = {"UndecodableRecord": 2, "LateRecord": 1}
    for reason, n in reasons.items():
        assert sample(metrics, "enrichd_dead_letters_total", pipeline="views", reason=reason) == n
    assert sample(metrics, "enrichd_late_records_total", pipeline="views") == 1


def test_lag_is_log_end_minus_batch_end_never_below_0() -> None:
    metrics = Metrics()
    metrics.lag(VIEW, {"tweets/0": 46, "tweets/1": 44}, {"tweets/0": 50, "tweets/1": 40})
    assert (
        sample(
            metrics, "enrichd_input_lag_records", pipeline="views", topic="tweets", partition="0"
        )
        == 4
    )
    # Tansu's ListOffsets can report less than was read: 0, not a negative lag
    assert (
        sample(
            metrics, "enrichd_input_lag_records", pipeline="views", topic="tweets", partition="1"
        )
        == 0
    )


def test_failures_and_restarts_follow_the_supervisors_totals() -> None:
    metrics = Metrics()
    metrics.supervision("views", running=True, failures=0, restarts=0)
    assert sample(metrics, "enrichd_pipeline_failures_total", pipeline="views") == 0
    metrics.supervision("views", running=False, failures=2, restarts=1)
    metrics.supervision("views", running=False, failures=2, restarts=1)
    assert sample(metrics, "enrichd_pipeline_failures_total", pipeline="views") == 2
    assert sample(metrics, "enrichd_pipeline_restarts_total", pipeline="views") == 1
    assert sample(metrics, "enrichd_pipeline_up", pipeline="views") == 0
    assert b"enrichd_pipeline_up" in generate_latest(metrics.registry)


def test_ready_once_every_query_reported_and_not_after_a_long_silence() -> None:
    health = Health(stall_after_s=60)
    assert not health.ready(0)  # no query yet
    health.started("views", now=100)
    health.started("totals", now=100)
    assert health.not_ready(110) == {
        "views": "started; no micro-batch or idle report yet",
        "totals": "started; no micro-batch or idle report yet",
    }
    health.progressed("views", 120)
    health.progressed("totals", 125)
    assert health.ready(150)
    assert health.not_ready(181) == {"views": "no progress for 61 s"}
    health.of("totals").running = False
    assert health.not_ready(150) == {"totals": "not running (failed; waiting for its restart)"}
    assert health.report(150) == {
        "totals": "not running (failed; waiting for its restart)",
        "views": "progressing",
    }


def test_a_pipeline_waiting_its_turn_to_start_says_so() -> None:
    health = Health(stall_after_s=60)
    health.started("views", now=100)
    health.of("clicks").waiting = True
    assert health.report(110) == {
        "clicks": "waiting its turn to start (a file's pipelines start one by one)",
        "views": "started; no micro-batch or idle report yet",
    }
    assert health.stalled(1000) == ["views"]  # never the one that has not started


def test_not_live_once_a_query_is_stalled_or_the_supervisor_stops_turning() -> None:
    health = Health(stall_after_s=60)
    assert health.liveness(0) == (True, "ok")  # before the supervisor's first look
    health.started("views", now=100)
    health.supervised(100)
    health.progressed("views", 120)
    health.supervised(179)
    assert health.liveness(180) == (True, "ok")
    health.supervised(181)
    assert health.liveness(181) == (
        False,
        "views: stalled: no progress report for 61 s (--stall-timeout 60 s)",
    )
    health.of("views").running = False  # failed: a restart of the query, not of the process
    assert health.liveness(181) == (True, "ok")
    assert health.liveness(242) == (
        False,
        "the supervisor has not checked its pipelines for 61 s",
    )


def test_stalled_means_running_and_silent_since_start_or_last_report() -> None:
    health = Health(stall_after_s=60)
    health.started("views", now=100)
    assert health.stalled(160) == []
    assert health.stalled(161) == ["views"]  # a first batch that never finished
    health.progressed("views", 150)
    assert health.stalled(200) == []
    assert health.stalled(211) == ["views"]
    health.of("views").running = False  # failed: the supervisor restarts it, not the watchdog
    assert health.stalled(300) == []


def test_the_joiners_own_counts_become_events() -> None:
    metrics = Metrics()
    metrics.batch_written(VIEW, BatchCounts("views", 1, joiner={"matched": 3, "revisions": 1}))
    metrics.batch_written(VIEW, BatchCounts("views", 2, joiner={"matched": 1}))
    assert sample(metrics, "enrichd_joiner_events_total", pipeline="views", event="matched") == 4
    assert sample(metrics, "enrichd_joiner_events_total", pipeline="views", event="revisions") == 1


def test_the_worker_caches_loads_are_counted_by_outcome() -> None:
    metrics = Metrics()
    metrics.batch_written(VIEW, BatchCounts("views", 1, state_cache={"hit": 5, "miss": 27}))
    metrics.batch_written(VIEW, BatchCounts("views", 2, state_cache={"hit": 30, "miss": 2}))
    loads = "enrichd_state_cache_loads_total"
    assert sample(metrics, loads, pipeline="views", outcome="hit") == 35
    assert sample(metrics, loads, pipeline="views", outcome="miss") == 29


def test_latency_tallies_add_up_into_one_cumulative_histogram_per_output() -> None:
    from daemon.model.latency import LATENCY_BUCKETS, tally

    metrics = Metrics()
    first = tally({9_900: 2, 8_000: 1}, 10_000)  # 0.1 s twice, 2 s once
    second = tally({9_950: 1}, 10_000)  # 0.05 s
    for found in (first, second):
        metrics.batch_written(VIEW, BatchCounts("views", 1, latency={"tweet-views": found}))
    name = "enrichd_end_to_end_latency_seconds"
    labels = {"pipeline": "views", "output": "output"}
    assert len(first[0]) == len(LATENCY_BUCKETS) + 1
    assert sample(metrics, f"{name}_bucket", **labels, le="0.1") == 3
    assert sample(metrics, f"{name}_bucket", **labels, le="1.0") == 3
    assert sample(metrics, f"{name}_bucket", **labels, le="2.0") == 4
    assert sample(metrics, f"{name}_bucket", **labels, le="+Inf") == 4
    assert sample(metrics, f"{name}_count", **labels) == 4
    assert sample(metrics, f"{name}_sum", **labels) == 0.1 + 0.1 + 2.0 + 0.05
    assert b"# TYPE enrichd_end_to_end_latency_seconds histogram" in generate_latest(
        metrics.registry
    )


def test_event_time_lag_is_the_time_since_the_newest_event_time_read() -> None:
    import time

    metrics = Metrics()
    now_ms = int(time.time() * 1000)
    metrics.batch_written(VIEW, BatchCounts("views", 1, event_time={"many": now_ms - 60_000}))
    metrics.batch_written(VIEW, BatchCounts("views", 2, event_time={"many": now_ms - 90_000}))
    lag = sample(metrics, "enrichd_event_time_lag_seconds", pipeline="views", input="many")
    assert lag is not None and 60 <= lag < 120  # the newer of the two counts; time passes
    assert sample(metrics, "enrichd_event_time_lag_seconds", pipeline="views", input="one") is None


def test_output_held_back_while_batches_commit_is_reported_after_the_limit() -> None:
    from daemon.service.observability import OutputVisibility

    check = OutputVisibility(after_s=30)
    ends = {"views/0": 120, "views/1": 80}
    stable = {"views/0": 100, "views/1": 80}  # partition 0 stops at an open transaction
    assert check.sample(stable, ends, batches=5, now=0) is None  # behind, for now
    assert check.sample(stable, {**ends, "views/0": 150}, batches=9, now=20) is None  # < 30 s
    why = check.sample(stable, {**ends, "views/0": 170}, batches=12, now=31)
    assert why == (
        "output views/0 held back: read_committed readers stop at offset 100 of 170 for 31 s, "
        "while 7 micro-batches committed"
    )
    # The transaction ends: readers move on, and the output is visible again.
    assert check.sample({**stable, "views/0": 170}, {**ends, "views/0": 170}, 13, 41) is None


def test_a_stable_offset_that_moves_or_a_query_that_commits_nothing_is_not_held_back() -> None:
    from daemon.service.observability import OutputVisibility

    check = OutputVisibility(after_s=30)
    ends = {"views/0": 120}
    assert check.sample({"views/0": 100}, ends, batches=5, now=0) is None
    # Behind again later, but it moved: a new transaction, not a stuck one.
    assert check.sample({"views/0": 110}, ends, batches=9, now=40) is None
    # Standing still for long, but no micro-batch committed since: nothing was held back.
    assert check.sample({"views/0": 110}, ends, batches=9, now=90) is None


def test_a_held_back_output_makes_the_query_not_ready() -> None:
    from daemon.service.observability import Health

    health = Health(stall_after_s=300)
    health.started("views", 0)
    health.progressed("views", 1)
    assert health.ready(2)
    health.of("views").hidden_output = "output views/0 held back: ..."
    assert health.not_ready(2) == {"views": "output views/0 held back: ..."}


def test_build_info_and_the_daemons_own_process_are_on_metrics() -> None:
    from importlib import metadata

    metrics = Metrics()
    labels = {
        "version": metadata.version("enrichd"),
        "python_version": platform.python_version(),
        "pyspark_version": metadata.version("pyspark"),
    }
    assert sample(metrics, "enrichd_build_info", **labels) == 1
    assert (sample(metrics, "process_open_fds") or 0) >= 3  # stdin, stdout, stderr at least
    assert (sample(metrics, "process_resident_memory_bytes") or 0) > 0
    assert sample(metrics, "process_cpu_seconds_total") is not None


def test_the_jvms_process_is_reported_once_its_pid_is_known() -> None:
    metrics = Metrics()
    assert sample(metrics, "enrichd_jvm_process_resident_memory_bytes") is None
    metrics.jvm_pid = os.getpid()  # this process, standing in for the JVM
    assert (sample(metrics, "enrichd_jvm_process_resident_memory_bytes") or 0) > 0
    start = sample(metrics, "enrichd_jvm_process_start_time_seconds")
    assert start == sample(metrics, "process_start_time_seconds")  # the same process
    assert sample(metrics, "enrichd_jvm_process_open_fds") is not None
