"""``apply_order`` sorts exactly as the plain key-function sort it replaced."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.joiners.base import InputRecord, apply_order

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


def reference(recs: list[InputRecord], order: str) -> list[InputRecord]:
    rank = {role: i for i, role in enumerate(ROLES)}
    time = (lambda r: r.timestamp) if order == "arrival" else (lambda r: r.event_time)
    return sorted(recs, key=lambda r: (time(r), rank.get(r.role, len(rank)), r.offset))


@settings(max_examples=400, deadline=None)
@given(recs=records, order=st.sampled_from(["event_time", "arrival"]))
def test_apply_order_is_the_stable_sort_by_time_role_and_offset(
    recs: list[InputRecord], order: str
) -> None:
    ordered = apply_order(recs, ROLES, order)  # type: ignore[arg-type]
    # Identity, not equality: records equal in every key must keep their input order.
    assert [id(r) for r in ordered] == [id(r) for r in reference(recs, order)]
