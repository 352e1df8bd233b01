"""examples/orders-three-tables.toml on the session's broker, for the chain's engine tests.

Each test gets the example with its own topics and a checkpoint of its own, produces the
lines of tests/joins/shop_chain.py to the input topics, and reads the output back decoded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import PipelineFile, load_pipeline_file
from tests.kafka_helpers import In, Out, client_conf, create_topic, produce, read_topic

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "orders-three-tables.toml"
OUTPUT_SCHEMA = ROOT / "schemas" / "order_three_tables.avsc"
TOPICS = {"stream": "shop-orders", "customers": "shop-customers", "regions": "shop-regions",
          "products": "shop-products"}  # fmt: skip
SCHEMAS = {"stream": "shop_order", "customers": "shop_customer", "regions": "shop_region",
           "products": "shop_product"}  # fmt: skip
Lines = Mapping[str, list[dict[str, Any]]]
Headers = Callable[[str, dict[str, Any]], list[tuple[str, bytes]]]
"""The headers to produce a record of a role with."""


@dataclass(frozen=True)
class ShopPipeline:
    """The example's pipeline on a broker (see the module docstring)."""

    path: Path
    conf: dict[str, str]
    suffix: str
    output_schema: Path = OUTPUT_SCHEMA

    @classmethod
    def on(
        cls,
        broker: EmbeddedBroker,
        tmp_path: Path,
        *,
        settings: str = "",
        tail: str = "",
        output_schema: Path = OUTPUT_SCHEMA,
        changes: Mapping[str, str] | None = None,
    ) -> ShopPipeline:
        """The example with ``settings`` added to its pipeline's table and ``tail`` at its end.

        Its input topics are created; ``output_schema`` replaces the output's schema; each of
        ``changes`` is made in the example's text (each text found once).
        """
        text = EXAMPLE.read_text()
        for old, new in (changes or {}).items():
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        text = text.replace(
            '"../schemas/order_three_tables.avsc"', json.dumps(output_schema.as_posix())
        )
        text = text.replace("../schemas", (ROOT / "schemas").as_posix())
        text = text.replace('"../state/orders-three-tables"', json.dumps(str(tmp_path / "cp")))
        suffix = tmp_path.name[-8:].replace("_", "-")
        for topic in [*TOPICS.values(), "orders-three-tables"]:
            text = text.replace(f'topic = "{topic}"', f'topic = "{topic}-{suffix}"')
        text = text.replace(
            "[spark]", f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n\n[spark]'
        )
        text = text.replace(
            'dead_letter_topic = "orders-three-tables.dlq"\n',
            f'dead_letter_topic = "orders-three-tables-{suffix}.dlq"\n{settings}\n',
        )
        path = tmp_path / "pipeline.toml"
        path.write_text(text + tail)
        conf = client_conf(broker.bootstrap_servers)
        for topic in TOPICS.values():
            create_topic(conf, f"{topic}-{suffix}")
        return cls(path, conf, suffix, output_schema)

    def file(self) -> PipelineFile:
        """The pipeline file, loaded."""
        return load_pipeline_file(self.path)

    def produce(self, lines: Lines, headers: Headers | None = None) -> None:
        """Produce each role's ``lines`` to its topic (each with ``headers``, if given).

        A line's ``"bytes"``, if it has them, are produced in place of its encoded value.
        """
        for role, records in lines.items():
            codec = AvroCodec(load_schema_file(ROOT / "schemas" / f"{SCHEMAS[role]}.avsc"))
            produce(
                self.conf,
                f"{TOPICS[role]}-{self.suffix}",
                [
                    In(
                        r["bytes"] if "bytes" in r else codec.encode(r["value"]),
                        r["key"].encode(),
                        r["timestamp"],
                        headers=None if headers is None else headers(role, r["value"]),
                    )
                    for r in records
                ],
            )

    def written(self) -> list[dict[str, Any]]:
        """The output topic's records, ``read_committed``: key, decoded value and headers."""
        codec = AvroCodec(load_schema_file(self.output_schema))
        return [
            {
                "key": None if out.key is None else out.key.decode(),
                "value": None if out.value is None else codec.decode(out.value),
                "headers": out.headers,
                "header_list": out.header_list,
            }
            for out in read_topic(self.conf, f"orders-three-tables-{self.suffix}")
        ]

    def dead_letters(self) -> list[Out]:
        """The dead-letter topic's records, ``read_committed``, as written."""
        return read_topic(self.conf, f"orders-three-tables-{self.suffix}.dlq")
