"""Which input headers a record keeps for its outputs, and a dead letter's error headers."""

from __future__ import annotations

import pytest

from daemon.model.headers import (
    ERROR_EXCEPTION,
    ERROR_MESSAGE,
    ERROR_STACKTRACE,
    carrier,
    dead_letter_headers,
    error_headers,
    merge_headers,
    pack,
    policy_names,
    reads_headers,
    unpack,
)

TRACE = ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
STATE = ("tracestate", b"vendor=1")
TENANT = ("tenant", b"acme")
UPSTREAM = ("enrichd.source.topic", b"clicks")
EMPTY = ("flag", None)
HEADERS = [TRACE, TENANT, UPSTREAM, STATE, EMPTY, TENANT]


def test_headers_pack_and_unpack_in_order_with_repeats_and_empty_values() -> None:
    assert unpack(pack(HEADERS)) == HEADERS
    assert pack([]) is None and pack(None) is None
    assert unpack(None) == []


def test_trace_keeps_w3c_trace_context_only() -> None:
    assert carrier("trace")(pack(HEADERS) or b"") == (TRACE, STATE)
    assert carrier("trace")(pack([TENANT]) or b"") is None


def test_all_keeps_every_header_but_enrichds_own() -> None:
    assert carrier("all")(pack(HEADERS) or b"") == (TRACE, TENANT, STATE, EMPTY, TENANT)
    assert carrier("all")(pack([UPSTREAM]) or b"") is None


def test_a_list_keeps_the_names_it_gives_every_time_they_occur() -> None:
    assert carrier(["tenant", "flag"])(pack(HEADERS) or b"") == (TENANT, EMPTY, TENANT)
    # An enrichd.* name is never carried, listed or not: each pipeline writes its own.
    assert carrier(["enrichd.source.topic"])(pack(HEADERS) or b"") is None


@pytest.mark.parametrize(
    ("policy", "names", "reads"),
    [
        ("none", frozenset(), False),
        ("trace", frozenset({"traceparent", "tracestate"}), True),
        ("all", None, True),
        (["tenant"], frozenset({"tenant"}), True),
    ],
)
def test_the_source_reads_headers_unless_the_policy_is_none(
    policy: object, names: frozenset[str] | None, reads: bool
) -> None:
    assert policy_names(policy) == names  # type: ignore[arg-type]
    assert reads_headers(policy) is reads  # type: ignore[arg-type]


def test_a_refusal_without_an_exception_names_enrichds_class_and_reason() -> None:
    assert error_headers("LateRecord", "older than the history kept") == [
        (ERROR_EXCEPTION, b"LateRecord"),
        (ERROR_MESSAGE, b"older than the history kept"),
    ]


def test_an_exception_gives_its_qualified_class_message_and_stack_trace() -> None:
    def failing() -> None:
        raise ZeroDivisionError("division by zero in the plugin")

    try:
        failing()
    except ZeroDivisionError as exc:
        found = dict(error_headers("JoinerFailed", "joiner 'x' raised", exc))
    assert found[ERROR_EXCEPTION] == b"ZeroDivisionError"  # builtins: no module, as Python says
    assert found[ERROR_MESSAGE] == b"division by zero in the plugin"
    trace = (found[ERROR_STACKTRACE] or b"").decode()
    assert trace.startswith("Traceback (most recent call last)") and "in failing" in trace

    class PluginError(Exception):
        pass

    (name, value), *_ = error_headers("JoinerFailed", "raised", PluginError("no"))
    assert (name, value) == (ERROR_EXCEPTION, f"{__name__}.{PluginError.__qualname__}".encode())


def test_a_dead_letter_keeps_its_records_headers_and_adds_why() -> None:
    letter = unpack(dead_letter_headers(pack(HEADERS), "MissingKey", "no join key"))
    assert letter == [*HEADERS, (ERROR_EXCEPTION, b"MissingKey"), (ERROR_MESSAGE, b"no join key")]
    assert unpack(dead_letter_headers(None, "MissingKey", "no join key")) == letter[len(HEADERS) :]


def test_error_headers_mask_a_remembered_secret_in_the_message_and_the_trace() -> None:
    """A plugin's exception may quote a setting: the dead letter's headers mask it as logs do."""
    from daemon import secrets

    secrets.remember_value("pw-planted-in-a-header")
    try:
        raise ValueError("cannot log in with pw-planted-in-a-header")
    except ValueError as exc:
        found = dict(error_headers("JoinerFailed", "raised with pw-planted-in-a-header", exc))
    assert found[ERROR_MESSAGE] == b"cannot log in with ***"
    assert b"pw-planted-in-a-header" not in (found[ERROR_STACKTRACE] or b"")
    (_, kind), (_, reason) = error_headers("OutputRejected", "refused pw-planted-in-a-header")
    assert (kind, reason) == (b"OutputRejected", b"refused ***")


def test_merged_headers_put_the_record_the_output_is_about_last() -> None:
    row = (("tenant", b"row"), TRACE)
    order = (TRACE, ("tenant", b"order"))
    assert merge_headers(row, None, order) == (("tenant", b"row"), TRACE, ("tenant", b"order"))


def test_merged_headers_keep_each_repeated_pair_at_its_last_place() -> None:
    # The record's own last `t` is B; the row's (t, B) goes, so the last `t` stays B.
    merged = merge_headers((("t", b"B"), EMPTY), (("t", b"A"), ("t", b"B")))
    assert merged == (EMPTY, ("t", b"A"), ("t", b"B"))
    assert [v for n, v in merged if n == "t"][-1] == b"B"


def test_merged_headers_of_inputs_without_any_are_empty_not_none() -> None:
    assert merge_headers(None, None) == ()
    assert merge_headers(None, (TENANT,)) == (TENANT,)
