"""A refusal becomes the one ACL that would allow it."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from daemon.verify.acl import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    acl_line,
    code_in_text,
    refusal,
)


@pytest.mark.parametrize(
    ("code", "names"),
    [
        (TOPIC_AUTHORIZATION_FAILED, "on topics prefixed 'pre'"),
        (CLUSTER_AUTHORIZATION_FAILED, "on topics prefixed 'pre'"),
        (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "on transactional ids prefixed 'enrichd.pre'"),
        (GROUP_AUTHORIZATION_FAILED, "on groups prefixed 'enrichd.pre'"),
    ],
)
def test_each_refusal_names_its_prefixed_acl_in_one_line(code: int, names: str) -> None:
    line = acl_line(code, "do it", "pre")
    assert line is not None and "\n" not in line
    assert line.startswith("missing permission to do it: allow ")
    assert names in line and "--resource-pattern-type prefixed" in line


def test_other_errors_are_no_refusal() -> None:
    assert acl_line(KafkaError.UNKNOWN_TOPIC_OR_PART, "do it", "pre") is None
    assert refusal(KafkaException(KafkaError(KafkaError._TIMED_OUT)), "do it", "pre") is None


def test_a_clients_exception_and_a_logged_failure_are_read_alike() -> None:
    raised = KafkaException(KafkaError(TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    logged = "pipeline p failed: KafkaException: Broker: Transactional Id authorization failed"
    assert code_in_text(logged) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert refusal(raised, "x", "pre") == refusal(RuntimeError(logged), "x", "pre")
    assert code_in_text("Broker: Group authorization failed") == GROUP_AUTHORIZATION_FAILED
    assert code_in_text("all fine") is None
