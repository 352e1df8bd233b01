"""From a pipeline's configuration to a running Spark streaming query."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.checkpoint import due_times
from daemon.checkpoint.batch_logs import drop_unfinished_first_entry
from daemon.checkpoint.layout import downstream, stopping_file
from daemon.continuous.lease_source import LongBatches
from daemon.continuous.query import first_positions, start_long_batches
from daemon.errors import ConfigError, KafkaUnavailableError
from daemon.formats.avro.codec import AvroCodec, record_fields
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.formats.serdes import codec_for as codec_for  # where callers look for it
from daemon.formats.serdes import key_codec_for
from daemon.kafka.admin import create_topics, existing_topics
from daemon.kafka.connect import client_conf as client_conf  # where callers look for it
from daemon.kafka.names import markers_topic
from daemon.kafka.topic_settings import describe
from daemon.model.config import PipelineConfig, PipelineFile, StateConfig
from daemon.model.envelope import Envelope
from daemon.model.headers import reads_headers
from daemon.model.selection import SelectFunction
from daemon.model.wire import OUTPUT, SOURCE
from daemon.operator.chain_processor import ChainProcessor
from daemon.operator.chain_step import ChainStep, operator_id
from daemon.operator.deferred import DeferredProcessor
from daemon.operator.processor import JoinerProcessor
from daemon.operator.spec import OperatorPlan
from daemon.pipeline.chain_checks import chain_problems
from daemon.pipeline.cluster_checks import check_cluster, create_markers_topics
from daemon.pipeline.continuous_checks import continuous_problems
from daemon.pipeline.marker_check import check_markers
from daemon.pipeline.selection import select_function
from daemon.pipeline.switches import COUNTS_SINK, SOURCE_READER
from daemon.plugin.configured import configure, pipeline_joiner
from daemon.plugin.host import registry
from daemon.plugin.joiner import JOINED, RETRACTED, Chain, Downstream, Joiner
from daemon.private_paths import private_folder
from daemon.sink.commit_turn import turn_needed
from daemon.sink.spark_sink import BatchCounter, KafkaSink
from daemon.sink.spec import OutputSpec, WriteLimits
from daemon.source.spark_source import KafkaSource
from daemon.source.spec import SourceInput, SourceSpec
from daemon.state.seed import Seed, discard_if_applied, seed_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery


log = logging.getLogger("enrichd.checkpoint")


WAKEUP_MS = 1000
"""How often a query whose joiner wakes quiet keys looks for due timers while no record comes
in, when the pipeline sets no trigger (see :data:`daemon.model.wire.CLOCK`)."""


@dataclass(frozen=True)
class PipelinePlan:
    """A pipeline resolved against the installed plugins, its schemas and its cluster.

    ``downstream`` is the plan of the joiner's second stage (:class:`Downstream`), a query of
    its own that reads this one's output topic.
    """

    config: PipelineConfig
    client_conf: dict[str, str]
    source: SourceSpec
    output: OutputSpec
    operator: OperatorPlan
    downstream: PipelinePlan | None = None
    chain: tuple[tuple[OperatorPlan, ChainStep], ...] = ()
    """With a joiner that runs as a chain: each operator's plan and place, in query order."""

    def stages(self) -> list[PipelinePlan]:
        """The plan and every stage after it, in data-flow order: one streaming query each."""
        return [self, *(self.downstream.stages() if self.downstream else [])]


def make_joiner(pipe: PipelineConfig, output_fields: tuple[str, ...] = ()) -> tuple[Joiner, str]:
    """Instantiate the pipeline's joiner with its validated options; also name its plugin."""
    return pipeline_joiner(pipe, output_fields), registry().get(pipe.joiner).plugin.name


def plan_pipeline(file: PipelineFile, pipe: PipelineConfig, conf: dict[str, str]) -> PipelinePlan:
    """Resolve one pipeline: joiner, codecs, topics (inputs must exist; outputs are created).

    Raises:
        ConfigError: the joiner, its options or a schema is wrong.
        KafkaUnavailableError: the broker is unreachable or an input topic is missing.
    """
    mismatch = pipe.key_parts_mismatch()
    if mismatch is not None:
        raise ConfigError(f"pipeline {pipe.name!r}: {mismatch}")
    codecs = {role: codec_for(file, spec, writing=False) for role, spec in pipe.inputs.items()}
    output_codec = codec_for(file, pipe.output, writing=True)
    output_keys: dict[str | None, KafkaKeyCodec] = {
        None: key_codec_for(file, pipe.output, writing=True)
    }
    # With a select the output record is the select's, not the joiner's value: the joiner
    # shapes nothing to the output schema then.
    joiner, plugin = make_joiner(pipe, () if pipe.select else record_fields(output_codec.schema))
    refused = chain_problems(pipe, joiner) + continuous_problems(pipe, joiner)
    if refused:
        raise ConfigError(f"pipeline {pipe.name!r}: {refused[0]}")
    key_codecs = {
        role: key_codec_for(file, spec, writing=False) for role, spec in pipe.inputs.items()
    }
    select, problems = select_function(pipe, joiner, codecs, key_codecs)
    if problems:
        raise ConfigError("\n".join(f"pipeline {pipe.name!r}: {problem}" for problem in problems))
    topics = existing_topics(conf)
    for role, spec in pipe.inputs.items():
        if spec.topic not in topics:
            raise KafkaUnavailableError(
                f"pipeline {pipe.name!r}: input {role!r} topic {spec.topic!r} does not exist; "
                "create it or fix `topic`"
            )
    partitions = max(topics[spec.topic] for spec in pipe.inputs.values())
    outputs = {
        name: (spec.topic, codec_for(file, spec, writing=True))
        for name, spec in pipe.outputs.items()
    }
    output_keys.update(
        {name: key_codec_for(file, spec, writing=True) for name, spec in pipe.outputs.items()}
    )
    stage = joiner.downstream()
    if stage is not None and stage.retractions is not None:
        # The engine's own topic between the stages, as Kafka Streams makes its repartition
        # topics: named after the output, in the output's schema.
        outputs[stage.retractions] = (f"{pipe.output.topic}.{stage.retractions}", output_codec)
    selects: dict[str | None, SelectFunction] = {}
    if select is not None:
        selects[None] = select
        if stage is not None and stage.retractions is not None:
            selects[stage.retractions] = select  # retractions are answers, in the output's shape
    create_topics(
        conf,
        {
            pipe.output.topic: partitions,
            pipe.dead_letters: 1,
            **{topic: partitions for topic, _ in outputs.values()},
        },
        file.kafka.replication_factor,
    )
    written = sorted({pipe.output.topic, pipe.dead_letters, *(t for t, _ in outputs.values())})
    stage_names = [pipe.name] + ([f"{pipe.name}.{stage.output}"] if stage is not None else [])
    markers = [markers_topic(file.kafka.id_prefix, name) for name in stage_names]
    exactly_once = pipe.delivery == "exactly_once"
    settings = describe(conf, written + (markers if exactly_once else []))
    check_cluster(file, pipe, settings)
    if exactly_once:
        create_markers_topics(file, conf, markers, settings)
    inputs = tuple(
        SourceInput(
            role,
            spec.topic,
            spec.key if isinstance(spec.key, str) else tuple(spec.key),
            spec.time,
            codecs[role],
            keyed_tombstones=role in joiner.keyed_tombstones,
            kafka_keys=key_codecs[role],
            envelope=spec.envelope,
            bootstrap=role in joiner.bootstrap_roles(),
        )
        # In the joiner's role order, whatever the file's: the source admits records of
        # equal timestamp in this order, as apply_order applies them.
        for role, spec in ((role, pipe.inputs[role]) for role in joiner.roles)
    )
    source = _source_spec(pipe, pipe.name, inputs, conf, file.kafka.id_prefix)
    output = OutputSpec(
        pipe.name,
        conf,
        pipe.delivery,
        output_topic=pipe.output.topic,
        dead_letter_topic=pipe.dead_letters,
        id_prefix=file.kafka.id_prefix,
        commit_turn=turn_needed(file.kafka.commit_turn, conf),
        transaction_timeout_ms=file.kafka.transaction_timeout,
        limits=WriteLimits.sized(conf, settings, written),
    )
    operator = _operator_plan(
        pipe,
        file.state,
        source,
        joiner,
        plugin,
        codecs,
        (pipe.output.topic, output_codec),
        outputs,
        envelopes={role: spec.envelope for role, spec in pipe.inputs.items() if spec.envelope},
        output_keys={n: c for n, c in output_keys.items() if c.key_format in ("avro", "json")},
        selects=selects or None,
    )
    downstream = None
    if stage is not None:
        downstream = _downstream_plan(
            pipe, output, stage, plugin, output_codec, outputs, file.state
        )
    # A chain's second stage reads its output as a one-joiner query's does: the chain ends
    # in one writing operator, and its numbering writes the retractions.
    chain = joiner.chain()
    steps = () if chain is None else _chain_steps(pipe, operator, chain)
    return PipelinePlan(pipe, conf, source, output, operator, downstream, chain=steps)


def _chain_steps(
    pipe: PipelineConfig, operator: OperatorPlan, chain: Chain
) -> tuple[tuple[OperatorPlan, ChainStep], ...]:
    """The operators of a joiner that runs as a chain: one per stage, and its last joiner.

    Each runs its stage's joiner with the pipeline's codecs, outputs and state settings.
    """
    inputs = [role for role, _ in operator.inputs]
    joiners = [stage.joiner for stage in chain.stages]
    if chain.last is not None:
        joiners.append(chain.last)
    return tuple(
        (
            replace(operator, joiner=joiner),
            ChainStep(
                chain,
                index,
                pipe.state_buckets,
                inputs.index("stream"),
                inputs.index(chain.stages[index].table) if index < len(chain.stages) else None,
            ),
        )
        for index, joiner in enumerate(joiners)
    )


def _downstream_plan(
    pipe: PipelineConfig,
    first: OutputSpec,
    stage: Downstream,
    plugin: str,
    output_codec: AvroCodec,
    outputs: dict[str, tuple[str, AvroCodec]],
    state: StateConfig,
) -> PipelinePlan:
    """The plan of the joiner's second stage.

    It reads the pipeline's output topic (role ``joined``) and, when the first stage
    retracts, its retractions (role ``retracted``), and writes as the first stage does
    (``first``: its cluster, delivery, id prefix and commit turn).
    """
    conf = first.client_conf
    if stage.output not in outputs:
        raise ConfigError(
            f"pipeline {pipe.name!r}: joiner {pipe.joiner!r} writes output {stage.output!r}; "
            f"add [pipeline.outputs.{stage.output}] with its topic and schema"
        )
    topic, codec = outputs[stage.output]
    read = {JOINED: pipe.output.topic}
    if stage.retractions is not None:
        read[RETRACTED] = outputs[stage.retractions][0]
    # The stage's joiner learns its own output's fields, as a pipeline's joiner does.
    second = configure(
        type(stage.joiner),
        stage.joiner.options,
        pipeline=f"{pipe.name}.{stage.output}",
        output_fields=record_fields(codec.schema),
    )
    config = pipe.model_copy(
        update={
            "name": second.context.pipeline,
            "checkpoint": downstream(pipe.checkpoint, stage.output),
        }
    )
    inputs = tuple(
        # A tombstone in the output (an answer withdrawn) is routed by its Kafka key and
        # adds nothing; its retraction takes the answer back.
        SourceInput(role, read[role], stage.key, None, output_codec, keyed_tombstones=True)
        for role in stage.joiner.roles  # in role order, as the first stage's inputs
        if role in read
    )
    source = _source_spec(pipe, config.name, inputs, conf, first.id_prefix)
    operator = _operator_plan(
        pipe,
        state,
        source,
        second,
        plugin,
        dict.fromkeys(read, output_codec),
        (topic, codec),
        {stage.output: (topic, codec)},
    )
    output = replace(first, pipeline=config.name, output_topic=topic)
    return PipelinePlan(config, conf, source, output, operator)


def _source_spec(
    pipe: PipelineConfig,
    name: str,
    inputs: tuple[SourceInput, ...],
    conf: dict[str, str],
    id_prefix: str,
) -> SourceSpec:
    """The source of a stage named ``name`` of ``pipe``: ``inputs`` with the pipeline's settings.

    Both stages read with the pipeline's batch cap, state buckets, ``on_missing_offsets`` and
    ``headers``.
    """
    return SourceSpec(
        inputs=inputs,
        client_conf=conf,
        max_records_per_batch=pipe.max_records_per_batch,
        state_buckets=pipe.state_buckets,
        pipeline=name,
        on_missing_offsets=pipe.on_missing_offsets,
        id_prefix=id_prefix,
        headers=reads_headers(pipe.headers),
    )


def _operator_plan(
    pipe: PipelineConfig,
    state: StateConfig,
    source: SourceSpec,
    joiner: Joiner,
    plugin: str,
    codecs: dict[str, AvroCodec],
    output: tuple[str, AvroCodec],
    outputs: dict[str, tuple[str, AvroCodec]],
    *,
    envelopes: dict[str, Envelope] | None = None,
    output_keys: dict[str | None, KafkaKeyCodec] | None = None,
    selects: dict[str | None, SelectFunction] | None = None,
) -> OperatorPlan:
    """The operator of a stage of ``pipe``: ``joiner`` over ``source``'s inputs, writing ``output``.

    ``output`` is the main output's topic and codec, ``outputs`` the others by name. Both
    stages dead-letter to the pipeline's topic, keep their state as ``[state]`` says and carry
    the headers its policy names.
    """
    topic, codec = output
    return OperatorPlan(
        joiner=joiner,
        codecs=codecs,
        output_codec=codec,
        output_topic=topic,
        dead_letter_topic=pipe.dead_letters,
        plugin=plugin,
        outputs=outputs,
        inputs=tuple((spec.role, spec.topic) for spec in source.inputs),
        envelopes=envelopes,
        output_keys=output_keys,
        selects=selects,
        state_cache=state.cache,
        state_cache_bytes=state.cache_size,
        state_deltas=state.deltas,
        headers=pipe.headers,
    )


def start_query(spark: SparkSession, plan: PipelinePlan) -> StreamingQuery:
    """Start the pipeline's streaming query: source, joiner operator (which writes), counting.

    What ends the query only adds up the operator's counts for the metrics, on the driver
    (``foreachBatch``: :class:`~daemon.sink.spark_sink.BatchCounter`).
    """
    pipe = plan.config
    for name in drop_unfinished_first_entry(pipe.checkpoint):
        log.warning(
            "pipeline %s: removed %s from its checkpoint, left by a process killed while "
            "planning its first batch",
            pipe.name,
            name,
            extra={"pipeline": pipe.name},
        )
    if pipe.continuous:
        return _start_continuous(spark, plan)
    joiner = plan.operator.joiner
    # A checkpoint that `daemon reset` or `daemon rescale` made starts from its seed.
    discard_if_applied(pipe.checkpoint)
    seed = seed_of(pipe.checkpoint)
    # Processing time drives state TTL and the timers of joiners that wake up quiet keys.
    wakes = joiner.wakes_up()
    # As many read tasks as the cluster runs at once: see daemon.source.planning. A joiner that
    # wakes keys gets a batch within a trigger interval (or WAKEUP_MS) of a bucket's timer
    # from the source's clock, since Spark fires timers only in batches; the sink's commit
    # keeps the buckets' timers in the checkpoint for it (daemon.checkpoint.due_times).
    checkpoint = str(pipe.checkpoint) if wakes else None
    output = replace(plan.output, checkpoint=checkpoint)
    if wakes:
        if not Path(pipe.checkpoint).exists():  # Spark would make it; the map goes in first
            private_folder(Path(pipe.checkpoint), what=f"pipeline {pipe.name!r}: checkpoint")
        if seed is None or not seed.has_state:  # a seed's map comes with it (reset.py)
            due_times.start_known(pipe.checkpoint)
    source = replace(
        plan.source,
        read_tasks=spark.sparkContext.defaultParallelism,
        read_on_driver=SOURCE_READER.value() == "driver",
        wake_ms=(pipe.trigger or WAKEUP_MS) if wakes else 0,
        trigger_ms=pipe.trigger,
        start=None if seed is None else seed.start,
        checkpoint=checkpoint,
    )
    if seed is not None and seed.has_state:
        # The seed's state holds what was bootstrapped before, as a restart's does: read on
        # in arrival order. A seed without state starts empty, so it bootstraps.
        inputs = tuple(replace(spec, bootstrap=False) for spec in source.inputs)
        source = replace(source, inputs=inputs)
    # A checkpoint behind the output's markers (its logs lost a batch) must not run.
    check_markers(output, Path(pipe.checkpoint))
    register_data_sources(spark)
    stream: Any = spark.readStream.format(KafkaSource.name()).option("spec", source.encode()).load()
    if plan.chain:
        joined = _chained(stream, plan, output, seed if seed and seed.has_state else None)
    else:
        joined = stream.groupBy(SOURCE.column("bucket")).transformWithState(
            statefulProcessor=DeferredProcessor(JoinerProcessor(plan.operator, output)),
            outputStructType=OUTPUT.ddl,
            outputMode="Append",
            timeMode=_time_mode(joiner),
            initialState=seed.initial_state(spark) if seed is not None and seed.has_state else None,
        )
    writer = joined.writeStream.option("checkpointLocation", str(pipe.checkpoint))
    if COUNTS_SINK.value() == "data-source":  # as before, for measuring (daemon.pipeline.switches)
        writer = writer.format(KafkaSink.name()).option("spec", output.encode())
    else:
        writer = writer.foreachBatch(BatchCounter(output))
    writer = writer.queryName(pipe.name)
    if pipe.trigger:
        writer = writer.trigger(processingTime=f"{pipe.trigger} milliseconds")
    return writer.start()


def _start_continuous(spark: SparkSession, plan: PipelinePlan) -> StreamingQuery:
    """Start a continuous pipeline's query of long batches (:mod:`daemon.continuous`).

    A lease without state starts every partition at its earliest offset, as a micro-batch
    query without a checkpoint does, or where the checkpoint's seed says (``daemon reset``
    or ``rescale``), taking in the seed's state.
    """
    pipe = plan.config
    discard_if_applied(pipe.checkpoint)
    seed = seed_of(pipe.checkpoint)
    check_markers(plan.output, Path(pipe.checkpoint))
    stopping = stopping_file(pipe.checkpoint)
    stopping.unlink(missing_ok=True)  # left by a stop that did not get to remove it
    first = first_positions(plan.source)
    batches = LongBatches(
        pipe.leases,
        pipe.long_batch,
        pipe.commit_interval,
        str(stopping),
        pipe.held_state_budget,
        first.bootstrap,  # a seeded checkpoint's inputs do not bootstrap: its state has them
    )
    starts = first.starts  # a partition the seed does not name: the earliest
    if seed is not None and not seed.to_earliest:
        starts.update(seed.offsets)
    seeded: list[Any] = []
    if seed is not None and seed.has_state:  # each operator's own
        found = operator_seeds(pipe.name, len(plan.chain), seed) if plan.chain else [seed]
        seeded = [each.state_frame(spark) for each in found if each is not None]
    return start_long_batches(
        spark,
        pipe.name,
        str(pipe.checkpoint),
        plan.operator,
        plan.output,
        plan.source,
        starts,
        batches,
        seeded,
        tuple(plan.chain),
    )


def end_long_batches(plan: PipelinePlan) -> None:
    """Ask a continuous pipeline's long batch to end, and no other to start.

    Its task ends within a commit interval, so that the query can be stopped between batches,
    as a micro-batch query is.

    The request is a file in the checkpoint, which a cluster's hosts share at the same path:
    a task on another host sees it once that file system shows it there. One that does not in
    time runs on until the stop interrupts its long batch, and the next start replays what it
    committed.
    """
    if plan.config.continuous:
        stopping_file(plan.config.checkpoint).touch()


def _chained(stream: Any, plan: PipelinePlan, output: OutputSpec, seed: Seed | None) -> Any:
    """The chain's operators one after the other, each grouped by its stage's bucket.

    Each operator but the last hands the next packs in the source's layout; the last writes.
    Rows of later stages' tables go through the earlier operators, so the source is read
    once (filtering it per stage would read every partition once per stage). With a seed's
    state (``daemon reset --keep-state``, ``daemon rescale``), each operator takes in its own.

    Raises:
        ConfigError: the seed holds no state for one of the operators.
    """
    seeds = operator_seeds(plan.config.name, len(plan.chain), seed)
    frame = stream
    for (operator, step), found in zip(plan.chain, seeds, strict=True):
        initial = None if found is None else found.initial_state(stream.sparkSession)
        frame = frame.groupBy(SOURCE.column("bucket")).transformWithState(
            statefulProcessor=DeferredProcessor(ChainProcessor(operator, output, step)),
            outputStructType=OUTPUT.ddl if step.writes else SOURCE.ddl,
            outputMode="Append",
            timeMode=_time_mode(operator.joiner),  # a stage's table's grace and state_ttl
            initialState=initial,
        )
    return frame


def operator_seeds(pipeline: str, count: int, seed: Seed | None) -> Sequence[Seed | None]:
    """The seed of each of a chain's ``count`` operators, in query order (None: no seed).

    Raises:
        ConfigError: the seed holds no state for one of the operators.
    """
    if seed is None:
        return [None] * count
    seeds = [seed.of_operator(operator_id(place, count)) for place in range(count)]
    for place, found in enumerate(seeds):
        if not found.has_state:
            raise ConfigError(
                f"pipeline {pipeline!r}: the seed in {seed.folder} holds no state for "
                f"operator {place + 1} of the chain's {count}; it was made for another query: "
                "restore the checkpoint it replaced, or reset it without --keep-state"
            )
    return seeds


def _time_mode(joiner: Joiner) -> str:
    """An operator's ``timeMode``: processing time drives its joiner's wake-ups and TTL."""
    return "ProcessingTime" if joiner.state_ttl_ms() or joiner.wakes_up() else "None"


def register_data_sources(spark: SparkSession) -> None:
    """Register enrichd's Kafka source and sink with ``spark`` unless they are already.

    A query names them by format: ``enrichd-kafka`` (:class:`KafkaSource`) and
    ``enrichd-kafka-sink`` (:class:`KafkaSink`).
    """
    registered = spark._jsparkSession.sessionState().dataSourceManager()
    for source in (KafkaSource, KafkaSink):
        if not registered.dataSourceExists(source.name()):
            spark.dataSource.register(source)
