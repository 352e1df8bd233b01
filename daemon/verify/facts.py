"""What the broker says about itself: its cluster, its API versions and its features.

The Kafka protocol has no request that answers with a broker's release. What a broker does
report is its cluster id and brokers (Metadata), the versions of each API it speaks and, from
ApiVersions v3 on, its feature levels (``metadata.version``, ``transaction.version``, ...).
verify reports those as they are and infers nothing from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.kafka import connect
from daemon.verify.protocol import BrokerConnection, ConnectionSettings, parse_api_versions

API_NAMES = {
    0: "Produce",
    1: "Fetch",
    3: "Metadata",
    10: "FindCoordinator",
    22: "InitProducerId",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    28: "TxnOffsetCommit",
}
"""The APIs exactly-once output rests on, by key: the report lists their versions."""
TRANSACTIONAL_APIS = (22, 24, 25, 26, 28)


@dataclass
class BrokerFacts:
    """What the cluster reported (see the module docstring)."""

    bootstrap: str
    cluster_id: str | None = None
    brokers: int = 0
    api_versions: dict[str, list[int]] = field(default_factory=dict)
    """Each listed API's ``[min, max]`` version, by name."""
    features: dict[str, Any] = field(default_factory=dict)
    """``{"supported": {name: [min, max]}, "finalized": {name: level}}``."""
    note: str | None = None
    """Why the API versions are missing, when they are."""

    @property
    def transactions(self) -> bool | None:
        """Whether the broker lists every transactional API; None when not asked."""
        if not self.api_versions:
            return None
        return all(API_NAMES[key] in self.api_versions for key in TRANSACTIONAL_APIS)

    def summary(self) -> list[str]:
        """The facts as lines for the report."""
        lines = [
            f"cluster {self.cluster_id or '(no id)'} at {self.bootstrap}, {self.brokers} broker(s)"
        ]
        if self.api_versions:
            listed = ", ".join(
                f"{name} v{low}-{high}" for name, (low, high) in self.api_versions.items()
            )
            lines.append(f"API versions: {listed}")
            lines.append(
                "transactions: " + ("supported" if self.transactions else "NOT fully listed")
            )
        else:
            lines.append(f"API versions: not asked ({self.note})")
        finalized = self.features.get("finalized") or {}
        supported = self.features.get("supported") or {}
        if finalized or supported:
            levels = ", ".join(f"{name}={level}" for name, level in sorted(finalized.items()))
            lines.append(f"features: {levels or 'none finalized'}; supported: {sorted(supported)}")
        elif self.api_versions:
            lines.append("features: none reported")
        return lines


def broker_facts(conf: dict[str, str], settings: ConnectionSettings | str) -> BrokerFacts:
    """Ask the cluster at ``conf`` for its facts (API versions over a raw connection)."""
    consumer = connect.consumer(conf, {"group.id": "enrichd-verify"})
    try:
        metadata = consumer.list_topics(timeout=10)
    finally:
        consumer.close()
    facts = BrokerFacts(conf["bootstrap.servers"], metadata.cluster_id, len(metadata.brokers))
    if isinstance(settings, str):
        facts.note = settings
        return facts
    broker = metadata.brokers[min(metadata.brokers)]
    try:
        connection = BrokerConnection(broker.host, broker.port, settings)
    except Exception as exc:
        facts.note = f"the raw connection failed: {exc}"
        return facts
    try:
        for key, name in API_NAMES.items():
            if key in connection.versions:
                facts.api_versions[name] = list(connection.versions[key])
        facts.features = parse_api_versions(connection.api_versions_body)
    finally:
        connection.close()
    return facts
