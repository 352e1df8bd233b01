"""Which registry answers are about the data and which are an outage to wait out."""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from daemon.errors import SchemaRegistryUnavailableError
from daemon.formats.registry import access_failure, is_not_found, unavailable

URL = "https://sr.example"
PAGE = "Unknown Schema Registry Error: b'<html><body><h1>404</h1></body></html>'"
"""What the client makes of a 404 page that is not the registry's JSON (error code -1)."""


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            SchemaRegistryError(404, -1, PAGE),
            f"schema registry {URL} answered 404 without a registry error code ({PAGE} (HTTP "
            "status code 404, SR code -1)): a proxy, load balancer or wrong path in front of "
            "it? check [schema_registry] url",
        ),
        (
            SchemaRegistryError(429, 42901, "Too Many Requests"),
            f"schema registry {URL} is too busy (429): Too Many Requests (HTTP status code "
            "429, SR code 42901)",
        ),
        (
            SchemaRegistryError(408, -1, "Request Timeout"),
            f"schema registry {URL} timed out (408): Request Timeout (HTTP status code 408, "
            "SR code -1)",
        ),
        (
            SchemaRegistryError(503, 50003, "unavailable"),
            f"schema registry {URL} failed (unavailable (HTTP status code 503, SR code 50003))",
        ),
    ],
)
def test_an_outage_or_a_page_in_the_registrys_place_is_no_answer_about_the_data(
    error: Exception, line: str
) -> None:
    failure = access_failure(URL, error)
    assert isinstance(failure, SchemaRegistryUnavailableError)
    assert str(failure) == line
    assert not is_not_found(error)


@pytest.mark.parametrize("code", [40401, 40402, 40403])
def test_only_the_registrys_own_not_found_is_an_answer_that_a_schema_is_unknown(
    code: int,
) -> None:
    error = SchemaRegistryError(404, code, "not found")
    assert is_not_found(error)
    assert access_failure(URL, error) is None


def test_a_refusal_to_register_is_an_answer_about_the_schema() -> None:
    for error in (
        SchemaRegistryError(409, 409, "incompatible"),
        SchemaRegistryError(422, 42201, "invalid schema"),
    ):
        assert access_failure(URL, error) is None


def test_reading_a_writer_schema_holds_back_on_anything_but_not_found() -> None:
    """A 400 from a proxy, a 200 with an HTML body the client cannot parse: not the data's."""
    failure = unavailable(URL, SchemaRegistryError(400, -1, "Bad Request"), "schema id 7")
    assert str(failure) == (
        f"schema registry {URL} answered 400 for schema id 7 (SchemaRegistryError: Bad "
        "Request (HTTP status code 400, SR code -1))"
    )
    failure = unavailable(URL, ValueError("Expecting value: line 1 column 1"), "schema id 7")
    assert str(failure) == (
        f"schema registry {URL} failed for schema id 7 (ValueError: Expecting value: line 1 "
        "column 1)"
    )
