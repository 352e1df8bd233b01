"""Records and their bytes: Avro, Kafka keys, registry subjects, and each input's codecs.

:mod:`~daemon.formats.avro` reads and writes Avro (compiled readers and writers),
:mod:`~daemon.formats.kafka_keys` reads and writes Kafka keys in their ``key_format``,
:mod:`~daemon.formats.registry` and :mod:`~daemon.formats.subjects` reach the Schema
Registry by Confluent's conventions, :mod:`~daemon.formats.serdes` makes the codecs of an
input or output, and :mod:`~daemon.formats.checks` is ``daemon validate``'s check of them.
"""
