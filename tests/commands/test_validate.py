"""`daemon validate`: every problem of a pipeline file in one report, one line each."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest
from typer.testing import CliRunner

from daemon.broker import EmbeddedBroker
from daemon.cli import app
from daemon.model.config import ConfigProblems
from daemon.pipeline.validation import validate_pipeline_file
from daemon.plugin.host import ENTRY_POINT_GROUP, JoinerRegistry, build_registry

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLE = FIXTURES / "pipelines" / "tweet_views.toml"
SUMMARY = "ok: 1 pipeline: tweet-views (comap: one=users, many=tweets -> tweet-views)"
runner = CliRunner()

VALID = f"""
[[pipeline]]
name = "views"
joiner = "comap"
checkpoint = "state/views"

[pipeline.inputs.one]
topic = "users"
schema = "{SCHEMAS / "user.avsc"}"
key = "id"
time = "updated_at"
field = "author"

[pipeline.inputs.many]
topic = "tweets"
schema = "{SCHEMAS / "tweet.avsc"}"
key = "author_id"
field = "tweet"

[pipeline.output]
topic = "views"
schema = "{SCHEMAS / "tweet_view.avsc"}"

[pipeline.options]
many_id = "id"
"""

Write = Callable[..., Path]


@pytest.fixture
def write(tmp_path: Path) -> Write:
    """Write VALID with replacements (old -> new pairs) to a pipeline file; return its path."""

    def make(*replacements: tuple[str, str], text: str = VALID) -> Path:
        for old, new in replacements:
            assert old in text, old
            text = text.replace(old, new, 1)
        path = tmp_path / "pipeline.toml"
        path.write_text(text, encoding="utf-8")
        return path

    return make


@cache
def builtin_joiners() -> JoinerRegistry:
    """Only enrichd's own joiners: the messages below list them, whatever else is installed."""
    own = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.dist and e.dist.name == "enrichd"]
    return build_registry(own)


def problems(path: Path) -> list[str]:
    return validate_pipeline_file(path, builtin_joiners())[1]


def where(path: Path, field: str, pipeline: str = "pipeline[0] (views)") -> str:
    return f"{path}: {pipeline}.{field}: "


def daemon(*args: str, debug: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real command line as a user would, without ENRICHD_DEBUG unless ``debug``."""
    env = {k: v for k, v in os.environ.items() if k != "ENRICHD_DEBUG"}
    if debug:
        env["ENRICHD_DEBUG"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_example_file_is_valid_with_a_summary() -> None:
    result = runner.invoke(app, ["validate", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert result.output == SUMMARY + "\n"


def test_example_file_in_a_real_process() -> None:
    result = daemon("validate", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert result.stdout == SUMMARY + "\n"


def test_valid_file_has_no_problems(write: Write) -> None:
    parsed, found = validate_pipeline_file(write())
    assert found == []
    assert parsed is not None
    assert parsed.pipeline[0].name == "views"


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert validate_pipeline_file(missing) == (None, [f"{missing}: no such file"])


def test_malformed_toml(write: Write) -> None:
    path = write(text="[[pipeline]\nname = 'x'\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}: not valid TOML")


def test_unknown_joiner_lists_the_installed_ones(write: Write) -> None:
    path = write(('joiner = "comap"', 'joiner = "coamp"'))
    assert problems(path) == [
        where(path, "joiner")
        + "unknown joiner 'coamp'; installed joiners: asof, comap, lookup, table, window"
    ]


def test_unimplemented_joiner_is_refused(write: Write) -> None:
    path = write(
        ('joiner = "comap"', 'joiner = "sketch"'),
        ("inputs.one]", "inputs.left]"),
        ("inputs.many]", "inputs.right]"),
        ('many_id = "id"', ""),
    )
    own = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.dist and e.dist.name == "enrichd"]
    sketch = EntryPoint(name="sketch", value="tests.fixtures.sketch_plugin", group="enrichd")
    joiners = build_registry([*own, sketch])
    assert validate_pipeline_file(path, joiners)[1] == [
        where(path, "joiner")
        + "joiner 'sketch' is not implemented yet; implemented joiners: "
        + "asof, comap, lookup, table, window"
    ]


def test_unknown_option_lists_the_valid_ones(write: Write) -> None:
    path = write(('many_id = "id"', 'many_id = "id"\nmany_idd = "x"'))
    assert problems(path) == [
        where(path, "options.many_idd")
        + "joiner 'comap' has no such option; its options: "
        + "many_id, max_many_per_key, many_deleted_field, state_ttl"
    ]


def test_missing_required_option(write: Write) -> None:
    path = write(('many_id = "id"', ""))
    assert problems(path) == [
        where(path, "options.many_id") + "required by joiner 'comap' but missing"
    ]


def test_wrong_duration_string(write: Write) -> None:
    path = write(('many_id = "id"', 'many_id = "id"\nstate_ttl = "5 minutes"'))
    (problem,) = problems(path)
    assert problem.startswith(where(path, "options.state_ttl") + "'5 minutes' is not a duration")
    assert "ms, s, m, h, d" in problem


def test_bad_option_value(write: Write) -> None:
    path = write(('many_id = "id"', 'many_id = "id"\nmax_many_per_key = 0'))
    (problem,) = problems(path)
    assert problem.startswith(where(path, "options.max_many_per_key"))
    assert "greater than 0" in problem


def test_unknown_role_lists_the_valid_ones(write: Write) -> None:
    path = write(("inputs.many]", "inputs.lots]"))
    assert problems(path) == [
        where(path, "inputs.lots") + "joiner 'comap' has no role 'lots'; its roles: one, many",
        where(path, "inputs")
        + "no input for role 'many' of joiner 'comap'; add [pipeline.inputs.many]",
    ]


def test_schema_file_missing(write: Write) -> None:
    missing = SCHEMAS / "nope.avsc"
    path = write((str(SCHEMAS / "tweet.avsc"), str(missing)))
    assert problems(path) == [
        where(path, "inputs.many.schema") + f"{missing}: schema file not found"
    ]


@pytest.mark.parametrize(
    ("name", "why"), [("not_avro", "not a valid Avro"), ("not_json", "not JSON")]
)
def test_schema_file_that_is_not_avro(write: Write, name: str, why: str) -> None:
    bad = FIXTURES / "schemas" / f"{name}.avsc"
    path = write((str(SCHEMAS / "tweet_view.avsc"), str(bad)))
    (problem,) = problems(path)
    assert problem.startswith(where(path, "output.schema") + f"{bad}: {why}")


def test_key_and_time_fields_must_be_in_the_schema(write: Write) -> None:
    path = write(('key = "author_id"', 'key = "writer_id"'), ('"updated_at"', '"changed_at"'))
    assert problems(path) == [
        where(path, "inputs.one.time")
        + f"field 'changed_at' is not in schema {SCHEMAS / 'user.avsc'}; "
        "its fields: id, name, avatar, updated_at",
        where(path, "inputs.many.key")
        + f"field 'writer_id' is not in schema {SCHEMAS / 'tweet.avsc'}; "
        "its fields: id, author_id, content",
    ]


def test_subject_needs_a_schema_registry(write: Write) -> None:
    path = write((f'schema = "{SCHEMAS / "tweet_view.avsc"}"', 'subject = "views-value"'))
    (problem,) = problems(path)
    assert problem.startswith(where(path, "output.subject") + "a subject needs a [schema_registry]")
    with_registry = write(
        (f'schema = "{SCHEMAS / "tweet_view.avsc"}"', 'subject = "views-value"'),
        ("[[pipeline]]", '[schema_registry]\nurl = "http://127.0.0.1:8081"\n\n[[pipeline]]'),
    )
    # Offline, the file is valid; online, validate asks the registry, which is not there.
    assert validate_pipeline_file(with_registry, builtin_joiners(), check_registry=False)[1] == []
    (unreachable,) = problems(with_registry)
    assert unreachable.startswith(where(with_registry, "output") + "cannot reach schema registry")


def test_duplicate_pipeline_names(write: Write) -> None:
    path = write(text=VALID + VALID)
    assert problems(path) == [
        where(path, "name", "pipeline[1] (views)")
        + "pipeline[0] has the same name; pipeline names must be unique"
    ]


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    path = FIXTURES / "pipelines" / "many_problems.toml"
    found = problems(path)
    fields = [problem.removeprefix(f"{path}: ").split(": ", 1)[0] for problem in found]
    assert fields == [
        "pipeline[0] (broken).inputs.lots",
        "pipeline[0] (broken).inputs",
        "pipeline[0] (broken).options.state_ttl",
        "pipeline[0] (broken).options.colour",
        "pipeline[0] (broken).inputs.one.schema",
        "pipeline[0] (broken).inputs.lots.key",
        "pipeline[0] (broken).output.subject",
        "pipeline[1] (later).joiner",
        "pipeline[1] (later).inputs.left.schema",
    ]


def test_command_raises_every_problem_for_main_to_print() -> None:
    path = FIXTURES / "pipelines" / "many_problems.toml"
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigProblems)
    assert len(result.exception.problems) == 9


def test_user_sees_one_error_line_per_problem_and_exit_1() -> None:
    path = FIXTURES / "pipelines" / "many_problems.toml"
    result = daemon("validate", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 9
    assert all(line.startswith(f"error: {path}: pipeline[") for line in lines)
    assert "Traceback" not in result.stderr


def test_user_sees_a_missing_file_as_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    result = daemon("validate", str(missing))
    assert result.returncode == 1
    assert result.stderr == f"error: {missing}: no such file\n"


def test_enrichd_debug_shows_the_traceback_instead_of_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    result = daemon("validate", str(missing), debug=True)
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert f"{missing}: no such file" in result.stderr.splitlines()[-1]


def test_help_starts_no_spark() -> None:
    """``daemon --help`` (and every command's help) answers without importing PySpark, so no
    JVM starts: that is what keeps it well under two seconds."""
    probe = (
        "import sys\n"
        "from daemon.cli import app\n"
        "for args in (['--help'], ['run', '--help'], ['replay', '--help'], ['demo', '--help']):\n"
        "    try:\n"
        "        app(args)\n"
        "    except SystemExit as done:\n"
        "        assert done.code == 0, (args, done.code)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "print('heavy modules:', heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "heavy modules: []"


def test_check_topics_needs_a_broker_address(write: Write) -> None:
    path = write()
    _, found = validate_pipeline_file(path, check_topics=True)
    assert found == [
        f"{path}: kafka.bootstrap_servers: checking topics needs a broker address; "
        "set [kafka] bootstrap_servers or leave out --check-topics"
    ]


def test_check_topics_reports_missing_input_topics(
    write: Write, broker: EmbeddedBroker, fresh_topic: Callable[[str], str]
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    users, tweets = fresh_topic("users"), fresh_topic("tweets")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(users, num_partitions=1)]).values():
        future.result(timeout=10)
    path = write(
        (
            "[[pipeline]]",
            f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n\n[[pipeline]]',
        ),
        ('topic = "users"', f'topic = "{users}"'),
        ('topic = "tweets"', f'topic = "{tweets}"'),
    )
    assert validate_pipeline_file(path)[1] == []  # topics are checked only when asked
    result = runner.invoke(app, ["validate", "--check-topics", str(path)])
    assert isinstance(result.exception, ConfigProblems)
    assert result.exception.problems == [
        where(path, "inputs.many.topic")
        + f"topic '{tweets}' does not exist on {broker.bootstrap_servers}"
    ]


def test_lookup_totals_need_their_output(tmp_path: Path) -> None:
    text = (REPO / "examples" / "clicks-per-region.toml").read_text(encoding="utf-8")
    start = text.index("[pipeline.outputs.totals]")
    end = text.index("[pipeline.options]")
    path = tmp_path / "clicks.toml"
    without_totals = text[:start] + text[end:]
    path.write_text(without_totals.replace('"../', f'"{REPO}/'), encoding="utf-8")
    assert problems(path) == [
        f"{path}: pipeline[0] (clicks-per-region).outputs: joiner 'lookup' writes output "
        "'totals' with these options; add [pipeline.outputs.totals] with its topic and schema"
    ]
    assert problems(REPO / "examples" / "clicks-per-region.toml") == []


def test_key_format_envelope_and_subject_problems_offline(write: Write) -> None:
    """Problems a file shows without a registry: keys of different part counts, a Kafka key
    field on a text key, an envelope the schema is not, a subject no registry can serve."""
    path = write(
        ('key = "id"', 'key = ["id", "kafka_key.tenant"]'),
        ('time = "updated_at"', 'envelope = "debezium"'),
        (f'schema = "{SCHEMAS / "tweet.avsc"}"', 'subject_name_strategy = "record"'),
        ('key = "author_id"', 'key = "author_id"\nkey_format = "avro"'),
    )
    assert problems(path) == [
        where(path, "inputs")
        + "the inputs' keys have different numbers of parts (one 2, many 1); records match "
        "only when every part is equal, so give each input's `key` as many fields",
        where(path, "inputs.one.envelope")
        + f"{SCHEMAS / 'user.avsc'} is not a Debezium envelope (a record with an `op` field "
        "and an `after` record); give the envelope's schema",
        where(path, "inputs.one.key")
        + "'kafka_key.tenant' names a field of the Kafka key, which needs key_format = "
        '"avro" or "json" (key_format is "string")',
        where(path, "inputs.many")
        + "no `schema`: the schema comes from the registry subject 'tweets-value' (or the one "
        "`subject_name_strategy` names), which needs a [schema_registry] section",
        where(path, "inputs.many.key_format")
        + 'an "avro" key without `key_schema` (or with `key_subject`) is read with a registry '
        "subject, which needs a [schema_registry] section; add one or give `key_schema` (an "
        ".avsc file)",
        where(path, "inputs.many.subject_name_strategy")
        + 'subject_name_strategy = "record" names the value subject after its record: give '
        "`schema` (the record's .avsc file) or `subject`",
        where(path, "inputs.many.subject_name_strategy")
        + 'subject_name_strategy = "record" names the key subject after its record: give '
        "`key_schema` (the record's .avsc file) or `key_subject`",
    ]


def test_the_fields_of_a_debezium_row_and_of_a_key_schema_are_checked(write: Write) -> None:
    path = write(
        (
            f'schema = "{SCHEMAS / "user.avsc"}"',
            f'schema = "{SCHEMAS / "customer_change.avsc"}"\nenvelope = "debezium"\n'
            f'key_format = "avro"\nkey_schema = "{SCHEMAS / "customer_key.avsc"}"',
        ),
        ('key = "id"', 'key = "kafka_key.customer"'),
        ('time = "updated_at"', 'time = "ts_ms"'),
    )
    row = f"the 'after' row of {SCHEMAS / 'customer_change.avsc'}"
    # The row is no User: the views' author field cannot hold it (see the output checks).
    author = (
        where(path, "output.schema") + f"field 'author' of {SCHEMAS / 'tweet_view.avsc'} "
        "cannot hold the one-side record (one record): field 'tier' is not in record User"
    )
    assert problems(path) == [
        where(path, "inputs.one.time") + f"field 'ts_ms' is not in schema {row}; "
        "its fields: id, name, tier",
        where(path, "inputs.one.key") + "field 'customer' is not in the key schema; its fields: id",
        author,
    ]
    fixed = write(
        (
            f'schema = "{SCHEMAS / "user.avsc"}"',
            f'schema = "{SCHEMAS / "customer_change.avsc"}"\nenvelope = "debezium"\n'
            f'key_format = "avro"\nkey_schema = "{SCHEMAS / "customer_key.avsc"}"',
        ),
        ('key = "id"', 'key = "kafka_key.id"'),
        ('time = "updated_at"', ""),
    )
    assert problems(fixed) == [author.replace(str(path), str(fixed))]


@pytest.mark.parametrize("example", sorted((REPO / "examples").glob("*.toml")))
def test_every_example_is_valid_offline(example: Path) -> None:
    assert validate_pipeline_file(example, builtin_joiners(), check_registry=False)[1] == []


def test_lookup_revisions_need_a_revision_field(tmp_path: Path) -> None:
    example = REPO / "examples" / "clicks-per-region-versioned.toml"
    assert problems(example) == []
    text = example.read_text(encoding="utf-8").replace('"../', f'"{REPO}/')
    path = tmp_path / "versioned.toml"
    path.write_text(text.replace("revised_click.avsc", "enriched_click.avsc"), encoding="utf-8")
    assert problems(path) == [
        f"{path}: pipeline[0] (clicks-per-region-versioned).output: pipeline "
        "'clicks-per-region-versioned': revisions = true numbers each answer in a `revision` "
        "field; add an int field `revision` to the output schema"
    ]


# -- what would dead-letter every record: option fields and output schemas (issue 49) -------


def schema_file(folder: Path, name: str, fields: list[dict[str, object]]) -> Path:
    """An output schema named ``name`` with ``fields`` (a record of the tweet view's shape)."""
    import json

    path = folder / f"{name}.avsc"
    path.write_text(json.dumps({"type": "record", "name": name, "fields": fields}))
    return path


USER = {"type": "record", "name": "User", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "avatar", "type": ["null", "string"], "default": None},
    {"name": "updated_at", "type": "long", "default": 0},
]}  # fmt: skip
TWEET = {"type": "record", "name": "Tweet", "fields": [
    {"name": "id", "type": "long"},
    {"name": "author_id", "type": "long"},
    {"name": "content", "type": "string"},
]}  # fmt: skip


def test_a_comap_output_schema_without_the_id_comap_writes(write: Write, tmp_path: Path) -> None:
    sides = [{"name": "author", "type": USER}, {"name": "tweet", "type": TWEET}]
    views = schema_file(tmp_path, "View", sides)
    path = write((str(SCHEMAS / "tweet_view.avsc"), str(views)))
    assert problems(path) == [
        where(path, "output.schema") + f"{views} has no field 'id', where joiner 'comap' writes "
        "the many-side record's id (many_id); add it"
    ]


def test_option_fields_must_be_in_their_inputs_schema_and_of_their_type(write: Write) -> None:
    path = write(
        ('many_id = "id"', 'many_id = "tweet_id"\nmany_deleted_field = "content"'),
    )
    assert problems(path) == [
        where(path, "options.many_id") + "field 'tweet_id' is not in the 'many' input's schema "
        f"{SCHEMAS / 'tweet.avsc'}, so joiner 'comap' would dead-letter every record; its "
        "fields: id, author_id, content",
        where(path, "options.many_deleted_field") + f"field 'content' of {SCHEMAS / 'tweet.avsc'} "
        "is string; joiner 'comap' needs boolean there",
    ]


def test_an_asof_left_id_the_left_schema_lacks(tmp_path: Path) -> None:
    example = REPO / "examples" / "recommendations.toml"
    text = example.read_text(encoding="utf-8").replace('"../', f'"{REPO}/')
    path = tmp_path / "recommendations.toml"
    path.write_text(text.replace("[pipeline.options]", '[pipeline.options]\nleft_id = "rec_id"'))
    assert problems(path) == [
        f"{path}: pipeline[0] (recommendations).options.left_id: field 'rec_id' is not in the "
        f"'left' input's schema {REPO / 'schemas' / 'recommendation.avsc'}, so joiner 'asof' "
        "would dead-letter every record; its fields: consultant, event_time, ingestion_time, "
        "recommendation"
    ]


def test_an_output_schema_that_cannot_hold_what_the_joiner_writes(
    write: Write, tmp_path: Path
) -> None:
    narrow_user = {**USER, "fields": USER["fields"][:2]}  # no avatar, no updated_at
    views = schema_file(tmp_path, "View", [
        {"name": "id", "type": "int"},  # the tweets' id is a long
        {"name": "author", "type": narrow_user},
        {"name": "tweet", "type": TWEET},
        {"name": "seen", "type": "boolean"},  # no default, and nothing writes it
    ])  # fmt: skip
    path = write((str(SCHEMAS / "tweet_view.avsc"), str(views)))
    assert problems(path) == [
        where(path, "output.schema") + f"field 'id' of {views} cannot hold the many-side "
        "record's id (many_id) (many field 'id'): a long does not fit an int",
        where(path, "output.schema") + f"field 'author' of {views} cannot hold the one-side "
        "record (one record): field 'avatar' is not in record User",
        where(path, "output.schema") + f"field 'seen' of {views} has no default, and joiner "
        "'comap' does not write it (it writes id, author, tweet); give it a default or remove it",
    ]


def test_a_side_the_mode_lets_be_missing_needs_a_nullable_field(tmp_path: Path) -> None:
    example = REPO / "examples" / "window-join.toml"
    text = example.read_text(encoding="utf-8").replace('"../', f'"{REPO}/')
    path = tmp_path / "window.toml"
    path.write_text(text.replace('mode = "left"', 'mode = "outer"'), encoding="utf-8")
    assert problems(path) == []  # the example's pair schema has both sides nullable
    import json

    pair = json.loads((REPO / "schemas" / "joined_pair.avsc").read_text(encoding="utf-8"))
    for field in pair["fields"]:
        field["type"] = next(t for t in field["type"] if t != "null")
        field.pop("default", None)
    strict = tmp_path / "pair.avsc"
    strict.write_text(json.dumps(pair), encoding="utf-8")
    path.write_text(
        text.replace('mode = "left"', 'mode = "outer"').replace(
            f"{REPO}/schemas/joined_pair.avsc", str(strict)
        ),
        encoding="utf-8",
    )
    found = problems(path)
    assert len(found) == 2
    assert [problem.split(": field ")[1].split(" of ")[0] for problem in found] == [
        "'left'",
        "'right'",
    ]
    assert all(problem.endswith('make it a union with "null"') for problem in found), found


def test_lookup_totals_fields_are_checked_against_the_enriched_records(tmp_path: Path) -> None:
    example = REPO / "examples" / "clicks-per-region.toml"
    text = example.read_text(encoding="utf-8").replace('"../', f'"{REPO}/')
    path = tmp_path / "clicks.toml"
    path.write_text(
        text.replace('group_by = "region.region"', 'group_by = "region.zone"').replace(
            'field = "click.clicks"', 'field = "click.user"'
        ),
        encoding="utf-8",
    )
    found = problems(path)
    at = f"{path}: pipeline[0] (clicks-per-region)"
    enriched = REPO / "schemas" / "enriched_click.avsc"
    assert found[:2] == [
        f"{at}.options.aggregate.group_by: field 'zone' is not in the output's schema "
        f"{enriched}, so joiner 'lookup' would dead-letter every record; its fields: user, region",
        f"{at}.options.aggregate.field: field 'click.user' of {enriched} is string; joiner "
        "'lookup' needs int or long or float or double there",
    ]


# -- a select: each path against what the joiner writes, the output schema against the select --


FLAT_VIEW = [
    {"name": "tweet_id", "type": "long"},
    {"name": "author", "type": "string"},
    {"name": "avatar", "type": "string"},
    {"name": "channel", "type": "int"},
    {"name": "seen", "type": "boolean"},
    {"name": "note", "type": ["null", "string"], "default": None},
]


def test_a_select_is_checked_entry_by_entry_one_line_each(write: Write, tmp_path: Path) -> None:
    output = schema_file(tmp_path, "FlatView", FLAT_VIEW)
    select = """
[pipeline.select]
tweet_id = "id"
author = "author.nam"
avatar = "author.avatar"
channel = { value = "web" }
content = "tweet.content"
at = "tweet.posted.at"
"""
    path = write((f'schema = "{SCHEMAS / "tweet_view.avsc"}"', f'schema = "{output}"'))
    path.write_text(path.read_text(encoding="utf-8") + select, encoding="utf-8")
    at = where(path, "select.{}").format
    assert problems(path) == [
        at("author") + "'author.nam': field 'nam' is not in the record at 'author' (the 'one' "
        "input's record); its fields: id, name, avatar, updated_at",
        at("at") + "'tweet.posted.at': field 'posted' is not in the record at 'tweet' (the "
        "'many' input's record); its fields: id, author_id, content",
        at("avatar") + f"field 'avatar' of {output} cannot hold 'author.avatar' (string | null): "
        'it may be null, which a string cannot hold; make it a union with "null"; or give the '
        "entry a default",
        at("channel") + "the constant 'web' is not a value of field 'channel' (int)",
        at("content") + f"{output} has no field 'content'; add it, or name the entry after one "
        "of its fields: tweet_id, author, avatar, channel, seen, note",
        where(path, "select") + f"field 'seen' of {output} has no default, and no entry of the "
        "select names it; add one, or give the field a default",
    ]
    fixed = write(
        (f'schema = "{SCHEMAS / "tweet_view.avsc"}"', f'schema = "{output}"'),
    )
    fixed.write_text(
        fixed.read_text(encoding="utf-8")
        + """
[pipeline.select]
tweet_id = "id"
author = "author.name"
avatar = { path = "author.avatar", default = "" }
channel = { value = 7 }
seen = { value = true }
""",
        encoding="utf-8",
    )
    assert problems(fixed) == []
