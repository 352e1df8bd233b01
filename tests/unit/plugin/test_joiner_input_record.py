"""The engine's fast ways of making, recasting and pickling an input record give the
dataclass's record."""

from __future__ import annotations

import copyreg
import dataclasses
import io
import pickle  # noqa: S403 - the test pickles its own record

import pytest

from daemon.plugin.joiner import InputRecord, input_record, recast

VALUES = ("many", "k1", {"id": 1, "text": "hi"}, 5, "tweets", 1, 42, b"k1", 7)


def test_a_record_made_through_its_slots_is_the_dataclasss_record() -> None:
    made = input_record(*VALUES)

    assert type(made) is InputRecord
    assert made == InputRecord(*VALUES)
    assert dataclasses.astuple(made) == dataclasses.astuple(InputRecord(*VALUES))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.key = "k2"  # type: ignore[misc]


def test_a_recast_record_changes_role_key_and_value_and_keeps_its_place_in_kafka() -> None:
    headers = (("traceparent", b"00-ab-cd-01"),)
    record = InputRecord(*VALUES, headers=headers)

    recast_record = recast(record, "stream", "region-7", {"click": record.value})

    assert type(recast_record) is InputRecord
    assert recast_record == dataclasses.replace(
        record, role="stream", key="region-7", value={"click": record.value}
    )


def test_a_record_pickles_as_its_fields_and_loads_back_equal() -> None:
    record = InputRecord(*VALUES)

    assert record.__reduce__() == (input_record, VALUES)
    loaded = pickle.loads(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))  # noqa: S301
    assert type(loaded) is InputRecord
    assert dataclasses.astuple(loaded) == (*VALUES, None)


def test_a_record_with_headers_pickles_them_too() -> None:
    headers = (("traceparent", b"00-ab-cd-01"), ("flag", None))
    record = InputRecord(*VALUES, headers=headers)

    assert record.__reduce__() == (input_record, (*VALUES, headers))
    loaded = pickle.loads(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))  # noqa: S301
    assert loaded == record and loaded.headers == headers


def test_a_record_pickled_the_dataclass_way_still_loads() -> None:
    """State written before records had ``__reduce__`` holds them in the slotted dataclass's
    own form: the class, then its fields for ``__setstate__``."""
    record = InputRecord(*VALUES)
    # Its nine fields: records had no headers then.
    old_form = (copyreg.__newobj__, (InputRecord,), VALUES)

    class OldPickler(pickle.Pickler):
        def reducer_override(self, obj: object) -> object:
            return old_form if obj is record else NotImplemented

    buffer = io.BytesIO()
    OldPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(record)

    loaded = pickle.loads(buffer.getvalue())  # noqa: S301
    assert loaded == record and loaded.headers is None
