"""The compiled Avro reader and writer: the switch that turns them off, the count of values
they hand to fastavro, and a bug in them surfacing instead of hiding behind fastavro."""

from __future__ import annotations

import io
import logging
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pytest

from daemon.formats.avro import codec as codec_module
from daemon.formats.avro.codec import (
    COMPILED_ENV,
    AvroCodec,
    CompiledCodecError,
    fallback_counts,
    load_schema_file,
)
from daemon.formats.avro.fields import FieldScanner

CLICK = load_schema_file(Path(__file__).resolve().parents[4] / "schemas" / "click.avsc")
A_CLICK = {"id": "c1", "user": "ada", "clicks": 3}


def fastavro_bytes(record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, CLICK, record)
    return buffer.getvalue()


def counted(direction: str, reason: str) -> int:
    return fallback_counts().get((direction, reason), 0)


@pytest.mark.parametrize("off", ["0", "false", "No", " off "])
def test_the_switch_turns_the_compiled_functions_off(
    off: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*args: Any) -> Any:
        raise AssertionError("compiled although switched off")

    monkeypatch.setenv(COMPILED_ENV, off)
    monkeypatch.setattr(codec_module, "compile_reader", never)
    monkeypatch.setattr(codec_module, "compile_writer", never)
    codec = AvroCodec(CLICK)

    assert codec.compiled is False
    data = codec.encode(A_CLICK)
    assert data == fastavro_bytes(A_CLICK)
    assert codec.decode(data) == A_CLICK
    assert codec.read_fields(data, ("user",)) is None  # a scanner is compiled code too
    # The codec is made on the driver and pickled to Spark's workers: the choice goes along.
    assert pickle.loads(pickle.dumps(codec)).compiled is False  # noqa: S301


@pytest.mark.parametrize("on", [None, "1", "true", ""])
def test_the_compiled_functions_are_on_unless_switched_off(
    on: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if on is None:
        monkeypatch.delenv(COMPILED_ENV, raising=False)
    else:
        monkeypatch.setenv(COMPILED_ENV, on)
    codec = AvroCodec(CLICK)
    data = codec.encode(A_CLICK)

    assert codec.compiled is True
    assert codec.decode(data) == A_CLICK
    assert codec._fast_writer is not None and codec._fast_readers[-1] is not None
    assert codec.read_fields(data, ("user",)) == ["ada"]


def test_a_value_the_writer_does_not_take_is_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codec_module, "_fallbacks", Counter())  # as in a new process
    monkeypatch.setattr(codec_module, "_logged", set())
    codec = AvroCodec(CLICK, compiled=True)
    # A bool for a long: fastavro writes it as 1; the compiled writer takes only an int.
    odd = {"id": "c1", "user": None, "clicks": True}

    with caplog.at_level(logging.WARNING, logger="enrichd.avro"):
        first, second = codec.encode(odd), codec.encode(odd)

    assert first == second == fastavro_bytes(odd)
    assert fallback_counts() == {("encode", "Unwritable"): 2}
    (logged,) = [r.getMessage() for r in caplog.records if r.name == "enrichd.avro"]
    assert "writer" in logged and "Unwritable" in logged and "Click" in logged


def test_a_missing_field_is_counted_and_fails_as_fastavro_says_without_a_log(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codec_module, "_logged", set())
    codec = AvroCodec(CLICK, compiled=True)
    before = counted("encode", "KeyError")
    with caplog.at_level(logging.WARNING, logger="enrichd.avro"):
        with pytest.raises(ValueError, match="clicks"):
            codec.encode({"id": "c1", "user": None})
    assert counted("encode", "KeyError") == before + 1
    # Bad data: fastavro's error says what is wrong (a dead letter, an `error:` line).
    assert [r for r in caplog.records if r.name == "enrichd.avro"] == []


def test_bytes_the_reader_does_not_take_are_counted_and_refused_as_fastavro_says() -> None:
    codec = AvroCodec(CLICK, compiled=True)
    data = codec.encode(A_CLICK)
    before = counted("decode", "IndexError")

    with pytest.raises(ValueError, match="not a record of this schema"):
        codec.decode(data[:3])  # cut inside the string "ada": the reader runs off the end

    assert counted("decode", "IndexError") == before + 1


def test_a_switched_off_codec_counts_no_fallbacks() -> None:
    codec = AvroCodec(CLICK, compiled=False)
    before = fallback_counts()
    codec.encode({"id": "c1", "user": None, "clicks": True})
    with pytest.raises(ValueError):
        codec.decode(b"\x02")
    assert fallback_counts() == before


def test_a_bug_in_the_compiled_writer_surfaces_naming_the_switch() -> None:
    codec = AvroCodec(CLICK, compiled=True)

    def buggy(value: Any) -> bytes:
        raise TypeError("unsupported operand")  # what no value may make it raise

    codec._fast_writer = buggy
    with pytest.raises(CompiledCodecError, match=f"{COMPILED_ENV}=0") as raised:
        codec.encode(A_CLICK)
    assert isinstance(raised.value.__cause__, TypeError)


def test_a_bug_in_the_compiled_reader_surfaces_naming_the_switch() -> None:
    codec = AvroCodec(CLICK, compiled=True)
    data = codec.encode(A_CLICK)

    def buggy(data: bytes, start: int) -> Any:
        raise NameError("v12")

    codec._fast_readers[-1] = buggy
    before = fallback_counts()
    with pytest.raises(CompiledCodecError, match="reader.*NameError: v12"):
        codec.decode(data)
    assert fallback_counts() == before  # a bug is no fallback


def test_a_scanner_refuses_bytes_it_does_not_take_and_surfaces_a_bug() -> None:
    def cut_short(data: bytes, start: int) -> list[Any]:
        raise IndexError("index out of range")

    def buggy(data: bytes, start: int) -> list[Any]:
        raise AttributeError("'int' object has no attribute 'decode'")

    with pytest.raises(ValueError, match="not a record of this schema"):
        FieldScanner(cut_short).scan(b"\x02")
    with pytest.raises(CompiledCodecError, match="scanner.*AttributeError"):
        FieldScanner(buggy).scan(b"\x02")
