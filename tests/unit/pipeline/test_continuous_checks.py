"""A pipeline file in continuous mode: what ``daemon validate`` accepts and refuses.

Each refusal is one line naming ``mode``: what continuous mode cannot run yet.
"""

from __future__ import annotations

from pathlib import Path

from daemon.model.config import load_pipeline_file
from daemon.pipeline.continuous_checks import slot_problems
from daemon.pipeline.validation import validate_pipeline_file

EXAMPLES = Path(__file__).parents[3] / "examples"


def _continuous(tmp_path: Path, example: str, *edits: tuple[str, str]) -> list[str]:
    """What validate says of ``example`` in continuous mode, with ``edits`` made to it."""
    text = (EXAMPLES / example).read_text()
    text = text.replace("[[pipeline]]\n", '[[pipeline]]\nmode = "continuous"\n', 1)
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    schemas = (EXAMPLES.parent / "schemas").as_posix()
    path = tmp_path / "pipeline.toml"
    path.write_text(text.replace("../schemas", schemas))
    return validate_pipeline_file(path, check_registry=False)[1]


def test_a_comap_in_continuous_mode_is_valid(tmp_path: Path) -> None:
    assert _continuous(tmp_path, "tweet-views.toml") == []


def test_a_lookup_of_several_tables_runs_in_continuous_mode_in_one_lease(tmp_path: Path) -> None:
    assert _continuous(tmp_path, "orders-three-tables.toml") == []
    (leases,) = _continuous(
        tmp_path,
        "orders-three-tables.toml",
        ('mode = "continuous"\n', 'mode = "continuous"\nleases = 2\n'),
    )
    assert leases.endswith(
        'mode: mode = "continuous" runs a lookup of several tables in one lease (its tables\' '
        "operators hand records on inside the lease's task, each keyed by its own table's "
        "key): set leases = 1, not 2"
    )


def test_a_lookup_with_running_totals_runs_both_stages_in_continuous_mode(tmp_path: Path) -> None:
    assert _continuous(tmp_path, "clicks-per-region.toml") == []


def test_a_lookup_that_bootstraps_its_table_runs_in_continuous_mode(tmp_path: Path) -> None:
    # The lookup without its running totals, its table bootstrapped.
    text = (EXAMPLES / "clicks-per-region.toml").read_text()
    totals = text[text.index("# Every change") : text.index("[pipeline.options]")]
    aggregate = text[text.index("[pipeline.options.aggregate]") :]
    bootstrapped = _continuous(
        tmp_path,
        "clicks-per-region.toml",
        (totals, ""),
        (aggregate, ""),
        ('mode = "left"\n', 'mode = "left"\nbootstrap = true\n'),
    )
    assert bootstrapped == []


def test_leases_that_would_take_every_task_slot_are_refused() -> None:
    file = load_pipeline_file(EXAMPLES / "tweet-views.toml")
    pipe = file.pipeline[0]
    continuous = pipe.model_copy(update={"mode": "continuous"})
    local = file.spark.model_copy(update={"master": "local[2]"})
    alone = file.model_copy(update={"pipeline": [continuous], "spark": local})
    assert slot_problems(alone) == []
    beside = alone.model_copy(update={"pipeline": [continuous, pipe]})
    assert slot_problems(beside) == []  # one slot each
    crowded = alone.model_copy(
        update={"pipeline": [continuous.model_copy(update={"leases": 2}), pipe]}
    )
    assert slot_problems(crowded) == [
        "[spark] master 'local[2]' runs 2 task(s) at once, and the continuous pipelines' 2 "
        "lease(s) hold one each for whole long batches and a micro-batch pipeline's tasks: "
        "give it 3 (local[3]) or set fewer `leases`"
    ]
    # A second stage is a query of its own, with as many leases: two slots, and one beside.
    totals = load_pipeline_file(EXAMPLES / "clicks-per-region.toml").pipeline[0]
    staged = totals.model_copy(update={"mode": "continuous"})
    assert slot_problems(alone.model_copy(update={"pipeline": [staged]})) == []
    assert slot_problems(alone.model_copy(update={"pipeline": [staged, pipe]})) == [
        "[spark] master 'local[2]' runs 2 task(s) at once, and the continuous pipelines' 2 "
        "lease(s) hold one each for whole long batches and a micro-batch pipeline's tasks: "
        "give it 3 (local[3]) or set fewer `leases`"
    ]
    cluster = crowded.model_copy(
        update={"spark": local.model_copy(update={"master": "spark://h:7077"})}
    )
    assert slot_problems(cluster) == []  # its slots are its workers' free cores


def test_leases_past_a_cluster_applications_cores_max_are_refused(tmp_path: Path) -> None:
    master = ('master = "local[2]"', 'master = "spark://h:7077"\nconf = { %s }')
    leases = ('mode = "continuous"\n', 'mode = "continuous"\nleases = 2\n')

    def capped(conf: str) -> list[str]:
        return _continuous(tmp_path, "tweet-views.toml", (master[0], master[1] % conf), leases)

    assert capped('"spark.cores.max" = "2"') == []
    (crowded,) = capped('"spark.cores.max" = "1"')
    assert crowded.endswith(
        "[spark.conf] spark.cores.max '1' lets the application run 1 task(s) at once on the "
        "cluster, and the continuous pipelines' 2 lease(s) hold one each for whole long "
        "batches: raise it to 2 or set fewer `leases`"
    )
    # A task of two cores takes two of the application's four.
    (two_each,) = capped('"spark.cores.max" = "3", "spark.task.cpus" = "2"')
    assert "run 1 task(s) at once" in two_each and "raise it to 4 or" in two_each
    # From the environment, as any setting of the file.
    assert capped('"spark.cores.max" = "${ENRICHD_TEST_CORES:-1}"') == [crowded]
