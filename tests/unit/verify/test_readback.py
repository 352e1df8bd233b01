"""Output values as the check compares them: decoded, or marked as bytes no schema reads."""

from __future__ import annotations

from pathlib import Path

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.verify.answer import canonical
from daemon.verify.readback import UNDECODABLE_OUTPUT, decoded
from daemon.verify.workload import POISON

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
TWEET = {"id": 9, "author_id": 1, "content": "hi"}


def codec() -> AvroCodec:
    return AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))


def test_a_record_of_the_schema_is_decoded_and_a_tombstone_or_a_dead_letter_kept() -> None:
    assert decoded(codec(), codec().encode(TWEET)) == TWEET
    assert decoded(codec(), None) is None
    assert decoded(None, b"\x01raw") == b"\x01raw"  # dead letters: their bytes as they are


def test_bytes_the_schema_cannot_decode_become_a_value_no_answer_holds() -> None:
    value = decoded(codec(), POISON)
    assert list(value) == [UNDECODABLE_OUTPUT]
    assert canonical(value) != canonical(TWEET)
