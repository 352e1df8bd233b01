"""``apply_order``: time, then role rank, partition and offset; input order among equals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.plugin.joiner import InputRecord, apply_order

ROLES = ("one", "many")

records = st.lists(
    st.builds(
        InputRecord,
        role=st.sampled_from([*ROLES, "other"]),  # "other": a role the joiner does not rank
        key=st.just("k"),
        value=st.none(),
        event_time=st.integers(0, 3),  # few values, so ties are common
        topic=st.sampled_from(["t1", "t2"]),
        partition=st.integers(0, 1),
        offset=st.integers(0, 3),
        timestamp=st.integers(0, 3),
    ),
    max_size=12,
)


def sort_key(record: InputRecord, order: str) -> tuple[int, int, int, int]:
    time = record.timestamp if order == "arrival" else record.event_time
    rank = ROLES.index(record.role) if record.role in ROLES else len(ROLES)
    return (time, rank, record.partition, record.offset)


@settings(max_examples=400, deadline=None)
@given(recs=records, order=st.sampled_from(["event_time", "arrival"]))
def test_apply_order_is_the_stable_sort_by_time_role_partition_and_offset(
    recs: list[InputRecord], order: str
) -> None:
    ordered = apply_order(recs, ROLES, order)  # type: ignore[arg-type]
    # Identity, not equality: every record once, and no other.
    assert sorted(map(id, ordered)) == sorted(map(id, recs))
    position = {id(r): i for i, r in enumerate(recs)}
    for before, after in zip(ordered, ordered[1:], strict=False):
        # In key order, and records equal in every key keep their input order.
        assert (sort_key(before, order), position[id(before)]) < (
            sort_key(after, order),
            position[id(after)],
        )
