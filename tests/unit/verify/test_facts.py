"""What the broker says about itself, as the report shows it."""

from __future__ import annotations

from daemon.verify.facts import BrokerFacts


def test_a_broker_with_every_transactional_api_and_features() -> None:
    facts = BrokerFacts(
        "b:9092",
        "abc",
        3,
        {
            "Produce": [3, 12],
            "Fetch": [4, 17],
            "InitProducerId": [0, 5],
            "AddPartitionsToTxn": [0, 5],
            "AddOffsetsToTxn": [0, 4],
            "EndTxn": [0, 5],
            "TxnOffsetCommit": [0, 5],
        },
        {"supported": {"transaction.version": [0, 2]}, "finalized": {"transaction.version": 2}},
    )
    assert facts.transactions is True
    lines = facts.summary()
    assert lines[0] == "cluster abc at b:9092, 3 broker(s)"
    assert lines[1].startswith("API versions: Produce v3-12, Fetch v4-17, InitProducerId v0-5")
    assert lines[2:] == [
        "transactions: supported",
        "features: transaction.version=2; supported: ['transaction.version']",
    ]


def test_a_broker_missing_an_api_or_not_asked() -> None:
    partial = BrokerFacts("b:9092", None, 1, {"Produce": [0, 9], "InitProducerId": [0, 1]})
    assert partial.transactions is False
    assert "transactions: NOT fully listed" in partial.summary()
    assert "features: none reported" in partial.summary()
    unasked = BrokerFacts("b:9092", note="sasl.mechanism GSSAPI is not spoken by the raw reader")
    assert unasked.transactions is None
    assert unasked.summary()[1] == (
        "API versions: not asked (sasl.mechanism GSSAPI is not spoken by the raw reader)"
    )
