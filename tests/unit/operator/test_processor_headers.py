"""The processor's side of headers: what a record keeps for its outputs, by the pipeline's
policy, across a stored state; and what a dead letter keeps of its record, and why.

Through the real broker and Spark: ``tests/delivery/test_dead_letters.py`` (outputs and dead
letters), ``tests/joins/test_lookup_versioned.py`` (revisions, a restart).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from daemon.joiners.window import Window, WindowOptions
from daemon.model.headers import (
    ERROR_EXCEPTION,
    ERROR_MESSAGE,
    ERROR_STACKTRACE,
    HeaderPolicy,
    pack,
    unpack,
)
from daemon.model.wire import InputRow, OutputRow
from daemon.operator.spec import OperatorPlan
from daemon.plugin.joiner import JoinerContext, JoinerOptions
from tests.unit.operator.processor_calls import (
    Handle,
    Regions,
    call,
    click,
    lookup_plan,
    plan_of,
    processor_on,
    region_update,
)

TRACE = ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
TENANT = ("tenant", b"acme")
NOW = 1_700_000_000_000


def headed(record: dict[str, Any], *headers: tuple[str, bytes]) -> dict[str, Any]:
    return {**record, "headers": list(headers)}


def rows(sent: list[tuple[Any, ...]]) -> list[OutputRow]:
    return [OutputRow._make(row) for row in sent]


@pytest.mark.parametrize(
    ("policy", "carried"),
    [("trace", [TRACE]), ("all", [TRACE, TENANT]), (["tenant"], [TENANT]), ("none", [])],
)
def test_an_output_carries_the_headers_of_its_record_that_the_policy_names(
    policy: HeaderPolicy, carried: list[tuple[str, bytes]]
) -> None:
    processor, _ = processor_on(replace(lookup_plan(), headers=policy))
    table_row = headed(region_update("ada", "north", 1), ("traceparent", b"00-other"))
    (output,) = rows(call(processor, [table_row, headed(click("ada", 2), TRACE, TENANT)]))
    assert unpack(output.headers) == carried  # the click's: the table row's are not merged


def test_a_record_held_in_state_keeps_its_headers_across_a_stored_bucket() -> None:
    """A window's left record waits for its window to close; a new processor on the same
    state store (as after a restart, no worker cache) writes its null result with them."""
    context = JoinerContext(pipeline="p", fields={"left": "left", "right": "right"})
    joiner = Window(WindowOptions(window=1_000, idle_timeout=60_000, mode="left"), context)
    codecs = {"left": "left_event", "right": "right_event"}
    plan: OperatorPlan = plan_of(joiner, codecs, "joined_pair", (("left", "l"), ("right", "r")))
    plan = replace(plan, headers="trace", state_cache=False)
    handle = Handle()
    first, _ = processor_on(plan, handle)
    held = {"input": 0, "key": "1", "value": {"k": 1, "v": "e", "at": 1_000}, "event_time": 1_000}
    assert call(first, [headed(held, TRACE, TENANT)]) == []

    again, _ = processor_on(plan, handle)
    later = {"input": 0, "key": "1", "value": {"k": 1, "v": "f", "at": 9_000}, "event_time": 9_000}
    (unmatched,) = rows(call(again, [later], now=NOW + 1))
    assert (unmatched.source_offset, unpack(unmatched.headers)) == (0, [TRACE])


class Failing(Regions):
    """Raises on every record it is given."""

    def process(self, key: Any, state: Any, records: Any, ctx: Any) -> Any:
        raise ZeroDivisionError("the plugin divided by zero")


def test_a_dead_letter_keeps_all_its_records_headers_and_says_why_as_kafka_streams_does() -> None:
    context = JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"})
    plan = plan_of(Failing(JoinerOptions(), context), {"stream": "click", "table": "user_region"},
                   "enriched_click", (("stream", "clicks"), ("table", "regions")))  # fmt: skip
    processor, _ = processor_on(replace(plan, headers="trace"))
    (letter,) = rows(call(processor, [headed(click("ada", 2), TRACE, TENANT)]))
    assert letter.error_class == "JoinerFailed"
    headers = unpack(letter.headers)
    assert headers[:2] == [TRACE, TENANT]  # all of them, not only the policy's
    found = dict(headers[2:])
    assert found[ERROR_EXCEPTION] == b"ZeroDivisionError"
    assert found[ERROR_MESSAGE] == b"the plugin divided by zero"
    assert b"in process" in (found[ERROR_STACKTRACE] or b"")


def test_a_refusal_without_an_exception_names_enrichds_class() -> None:
    processor, _ = processor_on(replace(lookup_plan(), headers="trace"))
    row = InputRow(0, "ada", 2, 0, 0, 2, b"c2", b"", None, pack([TENANT]))
    letter = processor._dead_letter(row, "MissingKey", "no join key field 'user'")
    assert unpack(letter.headers) == [
        TENANT,
        (ERROR_EXCEPTION, b"MissingKey"),
        (ERROR_MESSAGE, b"no join key field 'user'"),
    ]


def test_a_record_with_headers_is_read_without_them_when_the_policy_is_none() -> None:
    processor, _ = processor_on(replace(lookup_plan(), headers="none"))
    sent = call(processor, [region_update("ada", "n", 1), headed(click("ada", 2), TRACE)])
    assert [row.headers for row in rows(sent)] == [None]
