"""Sample users and tweets for the docker-compose demo: creates the input topics, produces, exits.

The compose stack runs it once before the daemon starts (the daemon refuses to start on
missing input topics); run it again to add tweets::

    docker compose run --rm sample-data

Records are plain Avro (the .avsc files of ``schemas/``), keyed by id, as the demo pipeline
reads them. Every run writes new tweet ids (from the clock), so the views keep growing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from confluent_kafka import Producer

from daemon.avro import AvroCodec, load_schema_file
from daemon.kafka.admin import create_topics


def main(argv: list[str] | None = None) -> None:
    """Create the topics and produce the users and tweets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="kafka:9092")
    parser.add_argument("--schemas", type=Path, default=Path("/etc/enrichd/schemas"))
    parser.add_argument("--users-topic", default="users")
    parser.add_argument("--tweets-topic", default="tweets")
    parser.add_argument("--authors", type=int, default=20)
    parser.add_argument("--tweets", type=int, default=200)
    parser.add_argument("--first-tweet-id", type=int, default=None)
    args = parser.parse_args(argv)

    conf = {"bootstrap.servers": args.bootstrap_servers}
    create_topics(conf, {args.users_topic: 2, args.tweets_topic: 2})
    users = AvroCodec(load_schema_file(args.schemas / "user.avsc"))
    tweets = AvroCodec(load_schema_file(args.schemas / "tweet.avsc"))
    first = args.first_tweet_id if args.first_tweet_id is not None else int(time.time() * 1000)
    producer = Producer({**conf, "linger.ms": 20})
    for author in range(1, args.authors + 1):
        user = {"id": author, "name": f"user {author}", "updated_at": int(time.time() * 1000)}
        producer.produce(args.users_topic, users.encode(user), key=str(author).encode())
    for n in range(args.tweets):
        tweet_id = first + n
        tweet = {"id": tweet_id, "author_id": 1 + n % args.authors, "content": f"tweet {n}"}
        producer.produce(args.tweets_topic, tweets.encode(tweet), key=str(tweet_id).encode())
        producer.poll(0)
    left = producer.flush(30)
    if left:
        raise SystemExit(f"{left} records not delivered to {args.bootstrap_servers}")
    print(
        f"produced {args.authors} users to {args.users_topic!r} and {args.tweets} tweets "
        f"(ids {first}..{first + args.tweets - 1}) to {args.tweets_topic!r}"
    )


if __name__ == "__main__":
    main()
