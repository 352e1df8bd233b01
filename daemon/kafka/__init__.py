"""The Kafka clients: every consumer, producer and admin client enrichd makes, made here.

:mod:`~daemon.kafka.connect` makes them from the pipeline file's client settings,
:mod:`~daemon.kafka.admin` checks and creates topics, and :mod:`~daemon.kafka.clients` holds
what they share: producing with delivery reports, reading a partition to its end.
"""
