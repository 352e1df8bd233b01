"""Prints the tweet views as the daemon writes them: what the embedded compose stack shows.

Reads the output topic of the tweet-views example from its beginning (committed records
only, as a downstream reader would) and prints one line per view, until stopped::

    python -m daemon.demos.show_views --bootstrap-servers broker:9092
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from daemon.demos.sample_data import SCHEMAS
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka import connect
from daemon.signals import StopRequest

_POLL_S = 1.0


def describe(key: bytes | None, view: dict[str, Any] | None) -> str:
    """One line about one view (None: the view was deleted)."""
    tweet_id = (key or b"?").decode(errors="replace")
    if view is None:
        return f"tweet {tweet_id}: view deleted"
    tweet, author = view.get("tweet") or {}, view.get("author") or {}
    return f"tweet {tweet_id} {tweet.get('content', '')!r} by {author.get('name', '(unknown)')!r}"


def wait_for_partitions(consumer: Any, topic: str, stop: StopRequest) -> list[int]:
    """The topic's partitions, once it exists (the daemon creates it when it starts)."""
    while not stop.is_set():
        try:
            found = consumer.list_topics(topic, timeout=5).topics.get(topic)
        except Exception:  # the broker is still starting: ask again
            found = None
        if found is not None and found.error is None and found.partitions:
            return sorted(found.partitions)
        stop.sleep(_POLL_S)
    return []


def main(argv: list[str] | None = None) -> None:
    """Print every view of the topic, from its beginning, until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="broker:9092")
    parser.add_argument("--topic", default="tweet-views")
    parser.add_argument("--schema", type=Path, default=SCHEMAS / "tweet_view.avsc")
    args = parser.parse_args(argv)

    stop = StopRequest()
    stop.install()  # as a container's PID 1, too
    codec = AvroCodec(load_schema_file(args.schema))
    consumer = connect.consumer(
        {"bootstrap.servers": args.bootstrap_servers},
        {
            "group.id": "enrichd-show-views",  # required by the client; assign() joins no group
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        },
    )
    try:
        partitions = wait_for_partitions(consumer, args.topic, stop)
        # From offset 0, not the client's logical beginning, which it looks up with
        # ListOffsets(EARLIEST): the embedded broker can answer that past the first views
        # (daemon.kafka.clients.log_starts). A log that starts later answers that 0 is out
        # of range, and the client resets to its earliest offset.
        consumer.assign([TopicPartition(args.topic, p, 0) for p in partitions])
        print(f"showing the views written to {args.topic!r}", flush=True)
        while not stop.is_set():
            message = consumer.poll(_POLL_S)
            if message is None or message.error() is not None:
                continue
            value = message.value()
            print(describe(message.key(), codec.decode(value) if value else None), flush=True)
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
