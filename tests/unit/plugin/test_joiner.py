"""The typed plugin contract: ``Joiner[Options, State]``, the ``Register`` protocol and the
default rule for dropping a key's state."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, Joiner, JoinerContext, JoinerOptions

ROOT = Path(__file__).resolve().parents[3]
CONTEXT = JoinerContext(pipeline="p", fields={"left": "left"})


class CountOptions(JoinerOptions):
    every: int = 2


class Counting(Joiner[CountOptions, dict[str, int]]):
    """Counts a key's records; forgets the key at every ``every``-th one."""

    name = "counting"
    description = "counts"
    roles = ("left",)

    def initial_state(self) -> dict[str, int]:
        return {"count": 0}

    def process(
        self, key: str, state: dict[str, int], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        for record in records:
            state["count"] = (state["count"] + 1) % self.options.every
            yield Emit(key=key, value={"count": state["count"]}, source=record)


def test_the_options_type_is_the_joiners_options_model() -> None:
    assert Counting.Options is CountOptions
    assert Counting(CountOptions(every=3), CONTEXT).options.every == 3


def test_a_subclass_of_a_typed_joiner_inherits_its_options_model() -> None:
    class Stricter(CountOptions):
        every: int = 5

    class Tuned(Counting):
        pass

    class Retuned(Counting):
        Options = Stricter

    assert Tuned.Options is CountOptions
    assert Retuned.Options is Stricter


def test_a_plain_joiner_keeps_the_base_options_model() -> None:
    class Plain(Joiner):
        name, description, roles = "plain", "plain", ("left",)

        def initial_state(self) -> Any:
            return None

        def process(self, *args: Any) -> Iterator[Emit | DeadLetter]:
            return iter(())

    assert Plain.Options is JoinerOptions


def test_an_options_class_other_than_the_declared_one_is_refused() -> None:
    with pytest.raises(TypeError, match="is not its options type CountOptions"):

        class Confused(Joiner[CountOptions, dict[str, int]]):  # noqa: F841 - refused
            Options = JoinerOptions


def test_by_default_a_state_equal_to_a_new_keys_is_empty() -> None:
    joiner = Counting(CountOptions(), CONTEXT)
    assert joiner.is_empty({"count": 0}) is True
    assert joiner.is_empty({"count": 1}) is False


def test_a_state_without_equality_is_never_empty_by_default() -> None:
    class Box:
        pass

    class Boxed(Joiner[JoinerOptions, Box]):
        name, description, roles = "boxed", "boxed", ("left",)

        def initial_state(self) -> Box:
            return Box()

        def process(self, *args: Any) -> Iterator[Emit | DeadLetter]:
            return iter(())

    joiner = Boxed(JoinerOptions(), CONTEXT)
    assert joiner.is_empty(joiner.initial_state()) is False


MISUSE = """
from __future__ import annotations

from collections.abc import Iterator, Sequence

from daemon.plugin.hookspecs import Register, hookimpl
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, Joiner, JoinerContext
from daemon.plugin.joiner import JoinerOptions


class MineOptions(JoinerOptions):
    n: int = 3


class Mine(Joiner[MineOptions, list[int]]):
    name = "mine"
    description = "mine"
    roles = ("left",)

    def initial_state(self) -> list[int]:
        return []

    def process(
        self, key: str, state: list[int], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        state.append(self.options.n)
        state.append(self.options.m)
        yield from ()


@hookimpl
def enrichd_register_joiners(register: Register) -> None:
    register(Mine)
    register(MineOptions)
"""


def test_mypy_checks_a_plugins_options_and_what_it_registers(tmp_path: Path) -> None:
    from mypy import api

    plugin = tmp_path / "mine.py"
    plugin.write_text(textwrap.dedent(MISUSE))
    config = ROOT / "pyproject.toml"
    out, _, status = api.run(
        [str(plugin), "--config-file", str(config), "--cache-dir", str(tmp_path / "cache")]
    )

    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1
    assert len(errors) == 2, out
    assert '"MineOptions" has no attribute "m"' in errors[0]
    assert 'incompatible type "type[MineOptions]"' in errors[1]
