"""The pipeline file's models and loading: every shape problem, one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.model.config import ConfigProblems, PipelineFile, load_pipeline_file

MINIMAL = """
[[pipeline]]
name = "p"
joiner = "comap"
checkpoint = "state/p"

[pipeline.inputs.one]
topic = "users"
schema = "user.avsc"
key = "id"

[pipeline.output]
topic = "out"
schema = "/abs/out.avsc"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ConfigProblems) as caught:
        load_pipeline_file(path)
    return caught.value.problems


def test_minimal_file_gets_defaults(tmp_path: Path) -> None:
    parsed = load_pipeline_file(write(tmp_path, MINIMAL))
    assert isinstance(parsed, PipelineFile)
    assert parsed.kafka.bootstrap_servers is None
    assert parsed.schema_registry is None
    assert parsed.spark.master == "local[2]"
    pipe = parsed.pipeline[0]
    assert pipe.delivery == "exactly_once"
    assert pipe.trigger == 0
    assert pipe.max_records_per_batch == 500_000
    assert pipe.dead_letters == "p.dlq"
    assert pipe.field_of("one") == "one"
    assert parsed.source == tmp_path / "pipeline.toml"


def test_relative_paths_resolve_against_the_files_folder(tmp_path: Path) -> None:
    pipe = load_pipeline_file(write(tmp_path, MINIMAL)).pipeline[0]
    assert pipe.inputs["one"].schema_file == tmp_path.resolve() / "user.avsc"
    assert pipe.checkpoint == tmp_path.resolve() / "state/p"
    assert pipe.output.schema_file == Path("/abs/out.avsc")
    spark = load_pipeline_file(write(tmp_path, f'[spark]\nlocal_dir = "scratch"\n{MINIMAL}')).spark
    assert spark.local_dir == tmp_path.resolve() / "scratch"


def test_trigger_is_a_duration(tmp_path: Path) -> None:
    text = MINIMAL.replace('checkpoint = "state/p"', 'checkpoint = "c"\ntrigger = "2s"')
    assert load_pipeline_file(write(tmp_path, text)).pipeline[0].trigger == 2000


def test_missing_file_is_one_problem(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert problems_of(missing) == [f"{missing}: no such file"]


def test_malformed_toml_is_one_problem(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, "[[pipeline]\nname = "))
    assert problem.startswith(f"{tmp_path / 'pipeline.toml'}: not valid TOML")


def test_every_shape_problem_names_file_and_field(tmp_path: Path) -> None:
    text = (
        MINIMAL.replace('key = "id"', 'key = "id"\nkee = "typo"')
        .replace('joiner = "comap"', 'joiner = "comap"\ndelivery = "maybe"')
        .replace('topic = "out"\n', "")
    )
    problems = problems_of(write(tmp_path, text))
    prefix = f"{tmp_path / 'pipeline.toml'}: pipeline[0] (p)"
    assert f"{prefix}.inputs.one.kee: unknown key; remove it or check its spelling" in problems
    assert f"{prefix}.output.topic: required but missing" in problems
    assert any(p.startswith(f"{prefix}.delivery: ") and "exactly_once" in p for p in problems)
    assert len(problems) == 3


def test_schema_alone_is_plain_avro_and_beside_a_subject_uses_the_registry(
    tmp_path: Path,
) -> None:
    plain = load_pipeline_file(write(tmp_path, MINIMAL)).pipeline[0].inputs["one"]
    assert not plain.registry_value and not plain.registry_key
    text = MINIMAL.replace('schema = "user.avsc"', 'schema = "user.avsc"\nsubject = "users-value"')
    framed = load_pipeline_file(write(tmp_path, text)).pipeline[0].inputs["one"]
    assert framed.registry_value
    by_convention = MINIMAL.replace('schema = "user.avsc"\n', "", 1)
    assert (
        load_pipeline_file(write(tmp_path, by_convention)).pipeline[0].inputs["one"].registry_value
    )


def test_subject_and_strategy_are_exclusive(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        'schema = "user.avsc"', 'subject = "users-value"\nsubject_name_strategy = "record"'
    )
    (problem,) = problems_of(write(tmp_path, text))
    assert "inputs.one" in problem
    assert "give `subject` or `subject_name_strategy`, not both" in problem


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('key_format = "yaml"', "'string', 'avro', 'json' or 'bytes'"),
        ('key_schema = "k.avsc"', 'need key_format = "avro"'),
        ('subject_name_strategy = "name"', "'topic', 'record' or 'topic_record'"),
        ('envelope = "maxwell"', "'debezium'"),
        ("key = []", "`key` needs a field name"),
        ('key = ["tenant", "tenant"]', "names a field twice"),
        ('writer_schema = "old.avsc"\nsubject = "users-value"', "`writer_schema` is for plain"),
    ],
)
def test_bad_key_and_format_settings_are_one_problem_each(
    tmp_path: Path, setting: str, message: str
) -> None:
    text = MINIMAL.replace(
        'key = "id"', setting if setting.startswith("key =") else f'key = "id"\n{setting}'
    )
    (problem,) = problems_of(write(tmp_path, text))
    assert "inputs.one" in problem and message in problem, problem


def test_auto_register_needs_a_schema_file(tmp_path: Path) -> None:
    text = MINIMAL.replace('schema = "/abs/out.avsc"', "auto_register = true")
    (problem,) = problems_of(write(tmp_path, text))
    assert "output" in problem and "auto_register registers the `schema`" in problem


def test_an_output_does_not_write_bytes_keys(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        'schema = "/abs/out.avsc"', 'schema = "/abs/out.avsc"\nkey_format = "bytes"'
    )
    (problem,) = problems_of(write(tmp_path, text))
    assert "output" in problem and 'key_format "bytes" is for reading keys' in problem, problem


def test_composite_keys_and_key_schemas_are_read(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        'key = "id"',
        'key = ["tenant", "kafka_key.id"]\nkey_format = "avro"\nkey_schema = "k.avsc"',
    )
    spec = load_pipeline_file(write(tmp_path, text)).pipeline[0].inputs["one"]
    assert spec.key_fields == ("tenant", "kafka_key.id")
    assert spec.key_schema == tmp_path / "k.avsc"
    assert not spec.registry_key  # a key_schema alone: plain Avro keys


def test_at_least_one_pipeline(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, '[spark]\nmaster = "local[1]"\n'))
    assert "pipeline" in problem


def test_bad_pipeline_name(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, MINIMAL.replace('name = "p"', 'name = "a b"')))
    assert ".name: " in problem


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (MINIMAL.replace('name = "p"', 'name = "a.totals"'), "pipeline[0] (a.totals).name"),
        ('[kafka]\nid_prefix = "team.staging"\n' + MINIMAL, "kafka.id_prefix"),
    ],
)
def test_a_dot_in_a_name_or_id_prefix_is_refused_with_one_line(
    tmp_path: Path, text: str, where: str
) -> None:
    """Pipeline 'a.totals' would share transactional ids with pipeline 'a''s totals stage."""
    (problem,) = problems_of(write(tmp_path, text))
    value = "'a.totals'" if "a.totals" in where else "'team.staging'"
    assert problem == (
        f"{tmp_path / 'pipeline.toml'}: {where}: {value} may hold only letters, digits, '_' "
        "and '-', starting with a letter or digit: it is part of the transactional ids and "
        "groups enrichd names, where a '.' would let two pipelines' names meet (pipeline "
        "'a.totals' and the totals stage of pipeline 'a')"
    )


def test_service_http_address_is_host_and_port(tmp_path: Path) -> None:
    assert load_pipeline_file(write(tmp_path, MINIMAL)).service.http is None
    served = load_pipeline_file(write(tmp_path, '[service]\nhttp = "0.0.0.0:9464"\n' + MINIMAL))
    assert served.service.http == "0.0.0.0:9464"
    (problem,) = problems_of(write(tmp_path, '[service]\nhttp = "9464"\n' + MINIMAL))
    assert "service.http" in problem


def test_secondary_outputs_resolve_their_schema_paths(tmp_path: Path) -> None:
    text = MINIMAL + '\n[pipeline.outputs.totals]\ntopic = "t"\nschema = "totals.avsc"\n'
    (pipe,) = load_pipeline_file(write(tmp_path, text)).pipeline
    assert pipe.outputs["totals"].topic == "t"
    assert pipe.outputs["totals"].schema_file == tmp_path.resolve() / "totals.avsc"


def test_id_prefix_defaults_to_todays_names_and_takes_one_per_environment(
    tmp_path: Path,
) -> None:
    assert load_pipeline_file(write(tmp_path, MINIMAL)).kafka.id_prefix == "enrichd"
    staged = load_pipeline_file(write(tmp_path, '[kafka]\nid_prefix = "staging"\n' + MINIMAL))
    assert staged.kafka.id_prefix == "staging"
    (problem,) = problems_of(write(tmp_path, '[kafka]\nid_prefix = "a b"\n' + MINIMAL))
    assert "kafka.id_prefix" in problem


def test_the_commit_turn_is_unset_unless_forced_either_way(tmp_path: Path) -> None:
    assert load_pipeline_file(write(tmp_path, MINIMAL)).kafka.commit_turn is None
    for value in (True, False):
        text = f"[kafka]\ncommit_turn = {str(value).lower()}\n" + MINIMAL
        assert load_pipeline_file(write(tmp_path, text)).kafka.commit_turn is value
    (problem,) = problems_of(write(tmp_path, '[kafka]\ncommit_turn = "sometimes"\n' + MINIMAL))
    assert "kafka.commit_turn" in problem


def test_the_state_cache_is_on_by_default_and_its_size_reads_units(tmp_path: Path) -> None:
    default = load_pipeline_file(write(tmp_path, MINIMAL)).state
    assert default.cache is True and default.cache_size is None

    text = '[state]\ncache = false\ncache_size = "512MiB"\n' + MINIMAL
    state = load_pipeline_file(write(tmp_path, text)).state
    assert state.cache is False and state.cache_size == 512 * 2**20

    (problem,) = problems_of(write(tmp_path, "[state]\ncache_size = 0\n" + MINIMAL))
    assert "state.cache_size" in problem
    (problem,) = problems_of(write(tmp_path, "[state]\ncache_bytes = 5\n" + MINIMAL))
    assert "state.cache_bytes" in problem


def test_state_deltas_are_on_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    assert load_pipeline_file(write(tmp_path, MINIMAL)).state.deltas is True
    text = "[state]\ndeltas = false\n" + MINIMAL
    assert load_pipeline_file(write(tmp_path, text)).state.deltas is False
    (problem,) = problems_of(write(tmp_path, '[state]\ndeltas = "sometimes"\n' + MINIMAL))
    assert "state.deltas" in problem


def test_headers_carry_trace_context_unless_set_otherwise(tmp_path: Path) -> None:
    assert load_pipeline_file(write(tmp_path, MINIMAL)).pipeline[0].headers == "trace"

    def with_headers(written: str) -> Path:
        line = 'checkpoint = "state/p"'
        return write(tmp_path, MINIMAL.replace(line, f"{line}\nheaders = {written}"))

    for policy, written in (("none", '"none"'), ("all", '"all"'), (["a", "b"], '["a", "b"]')):
        assert load_pipeline_file(with_headers(written)).pipeline[0].headers == policy
    for wrong in ('"traceparent"', "[]", '["a", 3]', "3"):
        (problem,) = problems_of(with_headers(wrong))
        assert "pipeline[0] (p).headers: " in problem
        assert 'is not a header policy: "trace", "none", "all" or a list of header names' in problem


def test_headers_come_from_the_record_unless_every_input_is_asked_for(tmp_path: Path) -> None:
    assert load_pipeline_file(write(tmp_path, MINIMAL)).pipeline[0].headers_from == "record"
    line = 'checkpoint = "state/p"'
    inputs = MINIMAL.replace(line, f'{line}\nheaders_from = "inputs"')
    assert load_pipeline_file(write(tmp_path, inputs)).pipeline[0].headers_from == "inputs"
    for wrong in ('"all"', '["inputs"]', "true"):
        (problem,) = problems_of(
            write(tmp_path, MINIMAL.replace(line, f"{line}\nheaders_from = {wrong}"))
        )
        assert "pipeline[0] (p).headers_from: " in problem
        assert 'not whose headers an output carries: "record"' in problem


def test_a_select_is_read_entry_by_entry_one_problem_each(tmp_path: Path) -> None:
    select = """
[pipeline.select]
id = "one.id"
name = { path = "one.name", default = "?" }
channel = { value = "web" }
"one_*" = "one.*"
"""
    pipe = load_pipeline_file(write(tmp_path, MINIMAL + select)).pipeline[0]
    assert pipe.select is not None
    assert {name: entry.model_dump(exclude_unset=True) for name, entry in pipe.select.items()} == {
        "id": {"path": "one.id"},
        "name": {"path": "one.name", "default": "?"},
        "channel": {"value": "web"},
        "one_*": {"path": "one.*"},
    }
    assert load_pipeline_file(write(tmp_path, MINIMAL)).pipeline[0].select is None
    wrong = """
[pipeline.select]
a = { path = "x", value = 1 }
b = { value = 1, default = 2 }
c = { pth = "x" }
"""
    problems = problems_of(write(tmp_path, MINIMAL + wrong))
    assert [problem.split(": ", 2)[1] for problem in problems] == [
        "pipeline[0] (p).select.a",
        "pipeline[0] (p).select.b",
        "pipeline[0] (p).select.c.pth",
    ]
    spread = '\n[pipeline.select]\n"one_*" = "one"\n'
    (problem,) = problems_of(write(tmp_path, MINIMAL + spread))
    assert "pipeline[0] (p).select: one_*: a spread names its fields with one *" in problem


def _with(settings: str) -> str:
    return MINIMAL.replace('checkpoint = "state/p"', f'checkpoint = "state/p"\n{settings}')


def test_micro_batch_is_the_default_and_continuous_reads_its_two_durations(
    tmp_path: Path,
) -> None:
    pipe = load_pipeline_file(write(tmp_path, MINIMAL)).pipeline[0]
    assert (pipe.mode, pipe.continuous) == ("micro_batch", False)
    text = _with('mode = "continuous"\ncommit_interval = "200ms"\nlong_batch = "5m"')
    pipe = load_pipeline_file(write(tmp_path, text)).pipeline[0]
    assert (pipe.continuous, pipe.commit_interval, pipe.long_batch) == (True, 200, 300_000)
    pipe = load_pipeline_file(write(tmp_path, _with('mode = "continuous"'))).pipeline[0]
    assert (pipe.commit_interval, pipe.long_batch) == (100, 120_000)


def test_a_continuous_pipeline_reads_its_held_state_budget_in_bytes(tmp_path: Path) -> None:
    pipe = load_pipeline_file(write(tmp_path, _with('mode = "continuous"'))).pipeline[0]
    assert pipe.held_state_budget == 1536 << 20
    text = _with('mode = "continuous"\nheld_state_budget = "256MiB"')
    pipe = load_pipeline_file(write(tmp_path, text)).pipeline[0]
    assert pipe.held_state_budget == 256 << 20
    for bad, says in (('"lots"', "'lots' is not a size"), ("0", "greater than 0")):
        text = _with(f'mode = "continuous"\nheld_state_budget = {bad}')
        (problem,) = problems_of(write(tmp_path, text))
        where = f"{tmp_path / 'pipeline.toml'}: pipeline[0] (p).held_state_budget: "
        assert problem.startswith(where) and says in problem and "\n" not in problem


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ('held_state_budget = "1GiB"', "`held_state_budget` and `leases` are settings"),
        ('commit_interval = "50ms"', "`long_batch`, `held_state_budget` and `leases` are settings"),
        ('long_batch = "1m"', "`long_batch`, `held_state_budget` and `leases` are settings"),
        ("leases = 2", "`long_batch`, `held_state_budget` and `leases` are settings"),
        (
            'mode = "continuous"\nleases = 4\nstate_buckets = 2',
            "`leases` (4) must not be more than `state_buckets` (2)",
        ),
        ('mode = "continuous"\ntrigger = "1s"', "`trigger` is a micro-batch setting"),
        (
            'mode = "continuous"\ncommit_interval = "2s"\nlong_batch = "2s"',
            "`commit_interval` (2000 ms) must be shorter than `long_batch` (2000 ms)",
        ),
        ('mode = "continuous"\ndelivery = "at_least_once"', "writes exactly once"),
        ('mode = "fast"', "mode: "),
    ],
)
def test_a_setting_its_mode_does_not_read_is_one_problem(
    tmp_path: Path, settings: str, says: str
) -> None:
    (problem,) = problems_of(write(tmp_path, _with(settings)))
    assert problem.startswith(f"{tmp_path / 'pipeline.toml'}: pipeline[0] (p)")
    assert says in problem
