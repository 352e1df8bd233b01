"""The pipeline: where the stages are composed into a running query, and kept safe.

:mod:`~daemon.pipeline.plan` resolves a pipeline of the file into a plan (the source's spec,
the operator's plan, the sink's spec) and starts its query; :mod:`~daemon.pipeline.validation`
checks a pipeline file without Spark; :mod:`~daemon.pipeline.checkpoint_shape` refuses a
checkpoint the pipeline does not fit; :mod:`~daemon.pipeline.lock` keeps one daemon per checkpoint;
:mod:`~daemon.pipeline.reset` moves a stopped pipeline's start (``daemon reset`` and
``daemon rescale``).
"""
