"""What the compiled Avro writer and reader share: a Python function written as text.

Each walks a parsed schema and writes straight-line code for it (see
:mod:`daemon.formats.avro.writer` and :mod:`daemon.formats.avro.reader`); this class holds the
lines, the constants the code refers to by name, and turns them into a function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CompiledCodecError(RuntimeError):
    """A compiled reader, writer or scanner failed in a way it never should: a bug in enrichd.

    Raised instead of the exception the generated code ran into, so that the record goes to
    the dead-letter topic with this message and no fallback hides it. Setting
    ``ENRICHD_AVRO_COMPILED=0`` decodes and encodes with fastavro alone until it is fixed.
    """

    @classmethod
    def of(cls, what: str, exc: BaseException) -> CompiledCodecError:
        """The error for ``exc``, raised by the compiled ``what`` (reader, writer, scanner)."""
        return cls(
            f"bug in enrichd's compiled Avro {what} ({type(exc).__name__}: {exc}); "
            "set ENRICHD_AVRO_COMPILED=0 to use fastavro alone"
        )


class FunctionText:
    """The text of one generated function, and the constants its lines name."""

    def __init__(self, schema: Any, constants: dict[str, Any]) -> None:
        self.named: dict[str, Any] = (
            schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
        )
        """The schema's named types, by full name, for references to them."""
        self.lines: list[str] = []
        self.constants = dict(constants)
        self.names = 0

    def fresh(self, stem: str) -> str:
        """A local variable name not used before."""
        self.names += 1
        return f"{stem}{self.names}"

    def constant(self, value: Any) -> str:
        """A name the code can use for ``value``."""
        name = self.fresh("C")
        self.constants[name] = value
        return name

    def emit(self, depth: int, line: str) -> None:
        """Add a line, indented ``depth`` levels."""
        self.lines.append("    " * depth + line)

    def define(self, signature: str, first: list[str], last: list[str]) -> Callable[..., Any]:
        """The function ``signature`` (``"name(args)"``): ``first``, the lines, ``last``."""
        name = signature.partition("(")[0]
        body = [*("    " + line for line in first), *self.lines, *("    " + line for line in last)]
        source = "\n".join([f"def {signature}:", *body])
        namespace = dict(self.constants)
        exec(compile(source, f"<compiled avro {name}>", "exec"), namespace)  # noqa: S102
        return namespace[name]  # type: ignore[no-any-return]
