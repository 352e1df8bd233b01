"""A lookup of several tables in a pipeline file: what ``daemon validate`` accepts and refuses.

Each refusal is one line naming the option; a pipeline of one table is read as before.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from daemon.joiners.aggregate import RETRACTIONS
from daemon.joiners.lookup_chain import Numbering
from daemon.joiners.lookup_tables import LookupOfTables
from daemon.model.config import load_pipeline_file
from daemon.pipeline.validation import validate_pipeline_file
from daemon.plugin.configured import pipeline_joiner
from tests.joins.shop_chain import UNITS_PER_REGION, example_with

EXAMPLE = Path(__file__).parents[3] / "examples" / "orders-three-tables.toml"


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    """The three-table example with ``old`` replaced by ``new`` (exactly once)."""
    text = EXAMPLE.read_text()
    assert text.count(old) == 1, old
    schemas = (EXAMPLE.parent.parent / "schemas").as_posix()
    text = text.replace(old, new).replace("../schemas", schemas)
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path


def test_the_three_table_example_is_valid_and_staged_in_key_order() -> None:
    parsed, problems = validate_pipeline_file(EXAMPLE)
    assert problems == []
    joiner = pipeline_joiner(parsed.pipeline[0])
    assert isinstance(joiner, LookupOfTables)
    assert joiner.roles == ("stream", "customers", "regions", "products")
    assert [table.role for table in joiner.tables or []] == ["customers", "regions", "products"]


def test_a_table_listed_before_the_table_its_key_reads_is_staged_after_it(
    tmp_path: Path,
) -> None:
    first = 'input = "customers"\nlookup_key = "order.customer_id"'
    second = 'input = "regions"\nlookup_key = "customer.region_id"'
    text = EXAMPLE.read_text()
    swapped = text.replace(first, "@@").replace(second, first).replace("@@", second)
    path = tmp_path / "pipeline.toml"
    schemas = (EXAMPLE.parent.parent / "schemas").as_posix()
    path.write_text(swapped.replace("../schemas", schemas))
    parsed, problems = validate_pipeline_file(path)
    assert problems == []
    joiner = pipeline_joiner(parsed.pipeline[0])
    assert isinstance(joiner, LookupOfTables)
    assert [table.role for table in joiner.tables or []] == ["customers", "regions", "products"]


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (
            'lookup_key = "customer.region_id"',
            'lookup_key = "client.region_id"',
            r"options\.tables: table 'regions': lookup_key 'client\.region_id' starts with "
            r"'client', which is neither the stream's field 'order' nor a table's",
        ),
        (
            'lookup_key = "order.customer_id"',
            'lookup_key = "region.customer_id"',
            r"tables customers, regions read each other's fields in a cycle",
        ),
        (
            'input = "products"',
            'input = "products"\nretention = "1h"',
            r"options\.tables\.2\.retention: joiner 'lookup' has no such option",
        ),
        (
            'key = "customer_id"',
            'key = "product_id"',
            r"inputs\.stream\.key: the stream\'s key is its key in the first table, "
            r"'customers' \(lookup_key order\.customer_id\): set key = \"customer_id\"",
        ),
        (
            'lookup_key = "order.product_id"',
            'lookup_key = ["order.product_id", "order.quantity"]',
            r"options\.tables \(products\): lookup_key has 2 part\(s\) and input 'products'",
        ),
        (
            'lookup_key = "customer.region_id"',
            'lookup_key = "customer.region"',
            r"options\.tables \(regions\): lookup_key 'customer\.region': field 'region' is "
            r"not in the 'customers' input's schema .*shop_customer\.avsc, so no stream record "
            r"would find a row of 'regions'; its fields: id, name, region_id, since",
        ),
        (
            'input = "regions"',
            'input = "regions"\ngrace = "2h"',
            r"options\.tables\.1: .*grace \(7200000 ms\) must not exceed history_retention",
        ),
        (
            '[[pipeline.options.tables]]\ninput = "customers"',
            "[pipeline.options]\nversioned = true\n\n[[pipeline.options.tables]]\n"
            'input = "customers"',
            r"with `tables`, `versioned` is each table's option",
        ),
    ],
)
def test_validate_refuses_with_one_line(tmp_path: Path, old: str, new: str, line: str) -> None:
    _, problems = validate_pipeline_file(_variant(tmp_path, old, new))
    assert len(problems) == 1, problems
    assert re.search(line, problems[0]), problems[0]


def test_a_table_takes_a_grace_and_another_a_state_ttl(tmp_path: Path) -> None:
    path = _variant(tmp_path, 'input = "regions"', 'input = "regions"\ngrace = "30s"')
    path.write_text(
        path.read_text().replace('input = "products"', 'input = "products"\nstate_ttl = "1d"')
    )
    parsed, problems = validate_pipeline_file(path)
    assert parsed is not None and problems == []
    joiner = pipeline_joiner(parsed.pipeline[0])
    chain = joiner.chain()
    assert chain is not None
    # The chain wakes and expires what its tables ask for, each stage its own.
    assert joiner.wakes_up() and joiner.state_ttl_ms() == 86_400_000
    stages = {stage.table: stage.joiner for stage in chain.stages}
    assert [t for t, j in stages.items() if j.wakes_up()] == ["regions"]
    assert [t for t, j in stages.items() if j.state_ttl_ms()] == ["products"]


def test_a_pipeline_of_one_table_is_a_one_table_lookup_as_before() -> None:
    parsed = load_pipeline_file(EXAMPLE.parent / "clicks-per-region-versioned.toml")
    joiner = pipeline_joiner(parsed.pipeline[0])
    assert isinstance(joiner, LookupOfTables)
    assert joiner.tables is None
    assert joiner.chain() is None
    assert joiner.roles == ("stream", "table")


def test_a_table_of_no_input_is_named_with_the_input_it_leaves_over(tmp_path: Path) -> None:
    _, problems = validate_pipeline_file(
        _variant(tmp_path, 'input = "products"', 'input = "suppliers"')
    )
    assert [p.split(").", 1)[1] for p in problems] == [
        "inputs.products: joiner 'lookup' has no role 'products'; "
        "its roles: stream, customers, regions, suppliers",
        "inputs: no input for role 'suppliers' of joiner 'lookup'; add [pipeline.inputs.suppliers]",
    ]


def test_each_path_of_a_composite_lookup_key_is_a_field_of_the_record_it_reads(
    tmp_path: Path,
) -> None:
    # Products priced per region, keyed by their JSON Kafka key's id and region: the
    # customer's part of the key names a field her record lacks.
    text = EXAMPLE.read_text().replace("../schemas", (EXAMPLE.parent.parent / "schemas").as_posix())
    for old, new in (
        (
            'shop_product.avsc"\nkey = "id"',
            'shop_product.avsc"\nkey_format = "json"\nkey = ["kafka_key.id", "kafka_key.region"]',
        ),
        ('lookup_key = "order.product_id"', 'lookup_key = ["order.product_id", "customer.zone"]'),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    _, problems = validate_pipeline_file(path)
    assert [p.split(").", 1)[1].split(" input's")[0] for p in problems] == [
        "options.tables (products): lookup_key 'customer.zone': field 'zone' is not in the "
        "'customers'"
    ]
    path.write_text(text.replace("customer.zone", "customer.region_id"))
    assert validate_pipeline_file(path)[1] == []


# -- running totals -------------------------------------------------------------------------


def test_running_totals_of_several_tables_retract_what_a_revision_replaces(
    tmp_path: Path,
) -> None:
    parsed, problems = validate_pipeline_file(example_with(tmp_path))
    assert parsed is not None and problems == []
    joiner = pipeline_joiner(parsed.pipeline[0])
    stage = joiner.downstream()
    assert stage is not None
    assert (stage.key, stage.output, stage.retractions) == ("region.name", "totals", RETRACTIONS)
    chain = joiner.chain()
    assert chain is not None and isinstance(chain.last, Numbering)
    assert chain.last.options.retractions
    # The totals output is declared, so validate checks its schema and describe shows it.
    assert [value.output for value in joiner.writes()] == [None, "totals"]


def test_running_totals_without_revisions_retract_nothing(tmp_path: Path) -> None:
    # No answer is ever replaced: no numbering, no retractions topic, totals only grow.
    path = example_with(tmp_path, old="revisions = true\n", new="")
    joiner = pipeline_joiner(load_pipeline_file(path).pipeline[0])
    stage = joiner.downstream()
    assert stage is not None and stage.retractions is None
    chain = joiner.chain()
    assert chain is not None and chain.last is None


@pytest.mark.parametrize(
    ("added", "line"),
    [
        (
            UNITS_PER_REGION.replace('"region.name"', '"region.nme"'),
            r"\.options\.aggregate\.group_by: field 'nme' is not in the output's schema .*"
            r"its fields: id, name, manager, since",
        ),
        (
            UNITS_PER_REGION.replace('"order.quantity"', '"customer.name"'),
            r"\.options\.aggregate\.field: field 'customer\.name' of .* is string; "
            r"joiner 'lookup' needs",
        ),
        (
            UNITS_PER_REGION.split("[pipeline.options.aggregate]")[0].replace(
                "[pipeline.outputs.totals]", "[pipeline.outputs.other]"
            )
            + "[pipeline.options.aggregate]"
            + UNITS_PER_REGION.split("[pipeline.options.aggregate]")[1],
            r"\.outputs: joiner 'lookup' writes output 'totals' with these options; "
            r"add \[pipeline\.outputs\.totals\]",
        ),
    ],
)
def test_validate_checks_running_totals_against_the_several_table_output(
    tmp_path: Path, added: str, line: str
) -> None:
    _, problems = validate_pipeline_file(example_with(tmp_path, added))
    assert any(re.search(line, problem) for problem in problems), problems


def test_aggregate_belongs_to_the_lookup_not_to_a_table(tmp_path: Path) -> None:
    path = example_with(
        tmp_path,
        old='input = "products"',
        new='input = "products"\naggregate = {group_by = "region.name"}',
    )
    _, problems = validate_pipeline_file(path)
    assert len(problems) == 1, problems
    assert re.search(r"options\.tables\.2: .*takes no `aggregate`", problems[0]), problems[0]


def test_describe_says_running_totals_work_with_several_tables() -> None:
    text = " ".join(LookupOfTables.semantics().split())
    assert "``aggregate`` is the whole lookup's (beside ``tables``, not in an entry)" in text
    assert "Not yet with several tables" not in text


def test_describe_says_what_a_grace_and_a_state_ttl_do_in_a_chain() -> None:
    text = " ".join(LookupOfTables.semantics().split())
    assert "``grace`` and ``state_ttl`` mean what they mean with one table" in text
    assert "goes on to the next table" in text
    assert "a tombstone to later orders at that stage" in text
