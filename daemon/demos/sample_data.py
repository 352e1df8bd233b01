"""Sample users and tweets for the compose stacks: creates the input topics and produces.

Both compose files run it before the daemon's pipeline can start (the daemon refuses to start
on missing input topics). Records are plain Avro (the installed example schemas), keyed by
id, as the tweet-views example reads them. Every run writes new tweet ids (from the clock),
so the views keep growing. ``--every S`` keeps going: one more tweet every S seconds, and now
and then a profile update, which fans out to a new view of each of that author's tweets::

    python -m daemon.demos.sample_data --bootstrap-servers kafka:9092
    python -m daemon.demos.sample_data --bootstrap-servers broker:9092 --every 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from daemon.demos import EXAMPLES
from daemon.errors import KafkaUnavailableError
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka.admin import create_topics
from daemon.kafka.connect import producer
from daemon.signals import StopRequest

SCHEMAS = EXAMPLES.parent / "schemas"
UPDATE_EVERY = 5
"""With ``--every``: one profile update after this many new tweets."""


def wait_for_topics(conf: dict[str, str], topics: dict[str, int], wait_s: float) -> None:
    """Create the topics, retrying while the broker is still starting (up to ``wait_s``).

    Raises:
        KafkaUnavailableError: the broker did not answer within ``wait_s``.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            create_topics(conf, topics)
            return
        except KafkaUnavailableError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


class Sample:
    """Produces the sample's users and tweets to the two topics."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.users = AvroCodec(load_schema_file(args.schemas / "user.avsc"))
        self.tweets = AvroCodec(load_schema_file(args.schemas / "tweet.avsc"))
        self.producer: Any = producer(
            {"bootstrap.servers": args.bootstrap_servers}, {"linger.ms": 20}
        )

    def user(self, author: int, name: str) -> None:
        """Produce one profile of ``author``."""
        user = {"id": author, "name": name, "updated_at": int(time.time() * 1000)}
        self.producer.produce(
            self.args.users_topic, self.users.encode(user), key=str(author).encode()
        )

    def tweet(self, tweet_id: int, n: int) -> None:
        """Produce the ``n``-th tweet, by author ``1 + n % authors``."""
        tweet = {"id": tweet_id, "author_id": 1 + n % self.args.authors, "content": f"tweet {n}"}
        self.producer.produce(
            self.args.tweets_topic, self.tweets.encode(tweet), key=str(tweet_id).encode()
        )
        self.producer.poll(0)

    def flush(self) -> None:
        """Wait until everything is delivered.

        Raises:
            SystemExit: records were still undelivered after 30 s.
        """
        left = self.producer.flush(30)
        if left:
            raise SystemExit(f"{left} records not delivered to {self.args.bootstrap_servers}")


def main(argv: list[str] | None = None) -> None:
    """Create the topics and produce the users and tweets (and more, with ``--every``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="kafka:9092")
    parser.add_argument("--schemas", type=Path, default=SCHEMAS)
    parser.add_argument("--users-topic", default="users")
    parser.add_argument("--tweets-topic", default="tweets")
    parser.add_argument("--authors", type=int, default=20)
    parser.add_argument("--tweets", type=int, default=200)
    parser.add_argument("--first-tweet-id", type=int, default=None)
    parser.add_argument("--every", type=float, default=None, metavar="SECONDS")
    parser.add_argument("--wait", type=float, default=60.0, metavar="SECONDS")
    args = parser.parse_args(argv)

    conf = {"bootstrap.servers": args.bootstrap_servers}
    wait_for_topics(conf, {args.users_topic: 2, args.tweets_topic: 2}, args.wait)
    sample = Sample(args)
    first = args.first_tweet_id if args.first_tweet_id is not None else int(time.time() * 1000)
    for author in range(1, args.authors + 1):
        sample.user(author, f"user {author}")
    for n in range(args.tweets):
        sample.tweet(first + n, n)
    sample.flush()
    print(
        f"produced {args.authors} users to {args.users_topic!r} and {args.tweets} tweets "
        f"(ids {first}..{first + args.tweets - 1}) to {args.tweets_topic!r}",
        flush=True,
    )
    if args.every is not None:
        keep_going(sample, first + args.tweets, args.tweets, args.every)


def keep_going(sample: Sample, next_id: int, n: int, every_s: float) -> None:
    """One more tweet every ``every_s`` seconds, and a profile update now and then, until stopped.

    SIGTERM and SIGINT end it with exit 0 (as PID 1 of a container, a process gets no
    default handling of SIGTERM).
    """
    stop = StopRequest()
    stop.install()
    renamed = 0
    while not stop.sleep(every_s):
        sample.tweet(next_id, n)
        next_id, n = next_id + 1, n + 1
        if n % UPDATE_EVERY == 0:
            renamed += 1
            author = 1 + renamed % sample.args.authors
            sample.user(author, f"user {author} (renamed {renamed})")
        sample.flush()
    print(f"stopped after tweet {next_id - 1}", flush=True)


if __name__ == "__main__":
    main()
