"""A refused request, as the one ACL that would allow it.

verify works under one prefix: its topics are named ``PREFIX.RUN.JOINER.ROLE``, its pipelines
``PREFIX.RUN.JOINER``, so their transactional ids (``enrichd.<pipeline>.<task>``), batch
markers topics (``enrichd.<pipeline>.markers``) and marker groups
(``enrichd.<pipeline>.marker...``) start with ``enrichd.PREFIX``. A platform
team grants these as prefixed ACLs once; each refusal names the missing one.

Example:
    >>> line = acl_line(GROUP_AUTHORIZATION_FAILED, "commit batch markers", "enrichd-verify")
    >>> line.split(": allow ")[1].split(" (kafka-acls")[0]
    "Read and Describe on groups prefixed 'enrichd.enrichd-verify'"
"""

from __future__ import annotations

from typing import Any

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

_TOPIC_OPERATIONS = ("Create", "Write", "Read", "Describe", "Delete")

_BY_TEXT = {
    "transactional id authorization failed": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    "group authorization failed": GROUP_AUTHORIZATION_FAILED,
    "topic authorization failed": TOPIC_AUTHORIZATION_FAILED,
    "cluster authorization failed": CLUSTER_AUTHORIZATION_FAILED,
}
"""librdkafka's texts of the authorization errors, for failures known only by a log line."""


def code_in_text(text: str) -> int | None:
    """The authorization error a client's message names, or None."""
    lowered = text.lower()
    return next((code for words, code in _BY_TEXT.items() if words in lowered), None)


def acl_line(code: int, doing: str, prefix: str) -> str | None:
    """One line naming the ACL that ``code`` says is missing, or None if it is no refusal.

    Args:
        code: the Kafka error code of the refusal.
        doing: what verify was doing, after "missing permission to".
        prefix: the prefix of verify's topics.
    """
    if code in (TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED):
        operations = " ".join(f"--operation {op}" for op in _TOPIC_OPERATIONS)
        listed = ", ".join(_TOPIC_OPERATIONS[:-1]) + f" and {_TOPIC_OPERATIONS[-1]}"
        return (
            f"missing permission to {doing}: allow {listed} on topics prefixed '{prefix}' "
            f"(kafka-acls --add --allow-principal User:NAME {operations} --topic {prefix} "
            "--resource-pattern-type prefixed)"
        )
    if code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return (
            f"missing permission to {doing}: allow Write and Describe on transactional ids "
            f"prefixed 'enrichd.{prefix}' (kafka-acls --add --allow-principal User:NAME "
            f"--operation Write --operation Describe --transactional-id enrichd.{prefix} "
            "--resource-pattern-type prefixed)"
        )
    if code == GROUP_AUTHORIZATION_FAILED:
        return (
            f"missing permission to {doing}: allow Read and Describe on groups prefixed "
            f"'enrichd.{prefix}' (kafka-acls --add --allow-principal User:NAME --operation Read "
            f"--operation Describe --group enrichd.{prefix} --resource-pattern-type prefixed)"
        )
    return None


def refusal(exc: BaseException, doing: str, prefix: str) -> str | None:
    """The ACL line for a client's exception (its KafkaError's code, or its text), or None."""
    error: Any = exc.args[0] if exc.args else None
    code = error.code() if hasattr(error, "code") else code_in_text(str(exc))
    return None if code is None else acl_line(int(code), doing, prefix)
