"""A chain's operators in processing time: a stage's grace woken, a stage's ``state_ttl``.

The operators of the three-table example run in turn in this process (chain_calls), each
micro-batch at a processing time of its own, each operator firing its bucket's timer after
its rows as Spark does. A partial a stage holds for its grace goes on when the stage wakes
its quiet key; a key past its ``state_ttl`` lets out what it holds and is forgotten, a
tombstone to later orders; and the numbering's count of open partials stays exact through
both, so it holds nothing once every key's input has ended (for random inputs, cuts and
pauses between micro-batches).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.operator.chain_processor import ChainProcessor
from daemon.operator.chain_step import TIMER_LABEL_BITS
from daemon.testing import by_key
from tests.unit.operator.chain_calls import END, LABEL, chain_operators, decoded_outputs, run_timed
from tests.unit.operator.processor_calls import NOW, stored_bucket

Line = tuple[str, int, dict[str, Any]]
REVISING = {"versioned": True, "revisions": True}
NO_CUSTOMER = {"id": "", "name": "nobody", "region_id": "none", "since": 0}
NO_REGION = {"id": "", "name": "nowhere", "manager": "", "since": 0}
NO_PRODUCT = {"id": "", "title": "none", "price": 0, "since": 0}


class Feed:
    """Input lines in arrival order: each its own Kafka timestamp and offset in its input."""

    def __init__(self) -> None:
        self.offsets: Counter[str] = Counter()
        self.clock = 0

    def _line(self, role: str, key: str, value: dict[str, Any] | None) -> Line:
        self.clock += 1
        offset = self.offsets[role]
        self.offsets[role] += 1
        return role, offset, {"key": key, "value": value, "timestamp": self.clock}

    def order(self, oid: str, customer: str, product: str, at: int) -> Line:
        value = {"id": oid, "customer_id": customer, "product_id": product, "quantity": 1}
        return self._line("stream", oid, {**value, "at": at})

    def customer(self, cid: str, since: int, region: str = "north") -> Line:
        value = {"id": cid, "name": f"{cid}@{since}", "region_id": region, "since": since}
        return self._line("customers", cid, value)

    def region(self, rid: str) -> Line:
        return self._line("regions", rid, {"id": rid, "name": rid, "manager": "m", "since": 0})

    def product(self, pid: str, since: int, price: int) -> Line:
        value = {"id": pid, "title": pid, "price": price, "since": since}
        return self._line("products", pid, value)

    def ends(self, *keys: str) -> list[Line]:
        """End-of-input markers of ``keys``: each ends that join key at every stage."""
        return [self._line(END, key, None) for key in keys]


def _answers(written: list[tuple[Any, ...]]) -> dict[str, list[tuple[Any, ...]]]:
    """Per order: (customer name, region, product price, revision) of each answer written."""
    return {
        key: [
            (v["customer"]["name"], v["region"]["name"], v["product"]["price"], v["revision"])
            for v in values
        ]
        for key, values in by_key(decoded_outputs(written)).items()
    }


def _numbered(operators: list[ChainProcessor]) -> set[str]:
    """The stream records the numbering (the writing operator) still holds an entry for."""
    return set(stored_bucket(operators[-1].handle).keys)  # type: ignore[arg-type]


def test_a_partial_held_for_its_grace_goes_on_when_its_stage_wakes() -> None:
    feed = Feed()
    operators = chain_operators(
        REVISING, each={"customers": {"grace": "50ms", "idle_timeout": "1s"}}
    )
    first = [feed.region("north"), feed.customer("c1", 0), feed.product("p1", 0, 10)]
    first.append(feed.order("o1", "c1", "p1", 100))  # held: c1's stream time is 100 < 150

    written = run_timed(operators, [(NOW, first), (NOW + 999, [])])
    assert written == []
    # The customers stage's timer reached the writing operator, under a label of its own.
    customers_label = (1 << TIMER_LABEL_BITS) + LABEL
    assert operators[-1]._timers[customers_label] == NOW + 1_000

    # Quiet for its idle_timeout, c1 is woken: its stream time moves on by the second that
    # passed, o1 is let out and goes through the regions and products stages to the output.
    written = run_timed(operators, [(NOW + 1_000, [])])
    assert _answers(written) == {"o1": [("c1@0", "north", 10, 0)]}
    assert operators[-1]._timers[customers_label] is None
    assert "" not in operators[-1]._covered  # a timer's call read no input range
    assert _numbered(operators)  # every stage keeps o1's answer, for revisions

    run_timed(operators, [(NOW + 1_001, feed.ends("c1", "north", "p1"))])
    assert _numbered(operators) == set()  # the counts were exact: nothing open is left


def test_an_expired_row_is_a_tombstone_and_what_its_key_held_goes_on_first() -> None:
    feed = Feed()
    products = {"grace": "50ms", "idle_timeout": "1h", "state_ttl": "1s"}
    operators = chain_operators(
        REVISING,
        each={"products": {**products, "mode": "left", "default": NO_PRODUCT}},
    )
    first = [feed.region("north"), feed.customer("c1", 0)]
    first += [feed.product("p1", 0, 10), feed.product("p2", 0, 20)]
    first.append(feed.order("o1", "c1", "p1", 100))  # held at p1 for its grace
    # p1 and p2 expire a second after they were written: p1 lets o1 out first, with the
    # price it had; an order after that finds neither row (p2's: the default), and a late
    # row of p1 revises o1 no more.
    later = [feed.order("o2", "c1", "p1", 200), feed.product("p1", 50, 99)]
    later.append(feed.order("o3", "c1", "p2", 200))

    written = run_timed(
        operators,
        [
            (NOW, first),
            (NOW + 1_000, []),
            (NOW + 1_001, later),
            (NOW + 1_002, feed.ends("c1", "north", "p1", "p2")),
        ],
    )

    assert _answers(written) == {
        "o1": [("c1@0", "north", 10, 0)],
        "o2": [("c1@0", "north", 99, 0)],
        "o3": [("c1@0", "north", 0, 0)],
    }
    assert operators[-1].merged_metrics()["products.expired"] == 2
    assert _numbered(operators) == set()


def test_what_a_timer_call_reports_wins_over_the_same_buckets_call_with_records() -> None:
    """The two reach the writing operator in either order; the timer call was the later."""
    for reports in (
        [{"timers": {"5": 700}}, {"timers": {"5": 900}, "fired": 800}],
        [{"timers": {"5": 900}, "fired": 800}, {"timers": {"5": 700}}],
    ):
        writer = chain_operators(REVISING)[-1]
        for report in reports:
            writer._take_report(report)
        assert writer._timers == {5: 900}


CUSTOMERS = ("c0", "c1")
PRODUCTS = ("p0", "p1")
PAUSES = (1, 400, 1_500, 4_000)
"""Processing time between micro-batches: within and past the customers' idle_timeout (1 s)
and the products' state_ttl (3 s)."""


@st.composite
def timed_inputs(draw: st.DrawFn) -> tuple[Feed, list[tuple[int, list[Line]]]]:
    """Orders and customer and product rows (late and out of order) in timed micro-batches."""
    feed = Feed()
    batches: list[tuple[int, list[Line]]] = [(NOW, [feed.region("north"), feed.region("south")])]
    now = NOW
    events = draw(st.lists(st.sampled_from(("order", "customer", "product")), max_size=14))
    for n, event in enumerate(events):
        at = draw(st.integers(0, 300))
        if event == "order":
            customer, product = draw(st.sampled_from(CUSTOMERS)), draw(st.sampled_from(PRODUCTS))
            line = feed.order(f"o{n}", customer, product, at)
        elif event == "customer":
            region = draw(st.sampled_from(("north", "south")))
            line = feed.customer(draw(st.sampled_from(CUSTOMERS)), at, region)
        else:
            line = feed.product(draw(st.sampled_from(PRODUCTS)), at, n)
        if draw(st.booleans()):
            now += draw(st.sampled_from(PAUSES))
            batches.append((now, []))
        batches[-1][1].append(line)
    now += draw(st.sampled_from(PAUSES))
    batches.append((now, feed.ends(*CUSTOMERS, *PRODUCTS, "north", "south", "none")))
    return feed, batches


def _as_of(lines: list[Line], role: str, key: str, at: int) -> dict[str, Any] | None:
    """The row of ``key`` valid at ``at``: the latest ``since`` up to it, of ties the last in."""
    found = None
    for line_role, _, line in lines:
        value = line["value"]
        if line_role == role and line["key"] == key and value["since"] <= at:
            if found is None or value["since"] >= found["since"]:
                found = value
    return found


@settings(max_examples=60, deadline=None)
@given(timed_inputs())
def test_woken_and_expired_stages_answer_every_order_and_leave_nothing_open(
    timed: tuple[Feed, list[tuple[int, list[Line]]]],
) -> None:
    _, batches = timed
    left = {"mode": "left"}
    operators = chain_operators(
        REVISING,
        each={
            "customers": {**left, "default": NO_CUSTOMER, "grace": "30ms", "idle_timeout": "1s"},
            "regions": {**left, "default": NO_REGION},
            "products": {**left, "default": NO_PRODUCT, "state_ttl": "3s"},
        },
    )

    written = run_timed(operators, batches)

    lines = [line for _, batch in batches for line in batch]
    orders = {line["key"]: line["value"] for role, _, line in lines if role == "stream"}
    answers = by_key(decoded_outputs(written))
    # Nothing held is lost: every order is answered, a woken or expired stage's partials
    # going on as a record's do; its answers numbered 0, 1, 2, ... with none forgotten early.
    assert set(answers) == set(orders)
    for values in answers.values():
        assert [value["revision"] for value in values] == list(range(len(values)))
    assert _numbered(operators) == set()
    # Customers and regions expire nothing: the last answer is the as-of join there.
    for oid, order in orders.items():
        last = answers[oid][-1]
        customer = _as_of(lines, "customers", order["customer_id"], order["at"]) or NO_CUSTOMER
        assert last["customer"] == customer
        assert last["region"]["name"] == {"north": "north", "south": "south"}.get(
            customer["region_id"], "nowhere"
        )
