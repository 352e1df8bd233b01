"""A checkpoint folder's files, below the stages that write and read them.

:mod:`~daemon.checkpoint.layout` names every file and folder of a checkpoint, Spark's and
enrichd's; :mod:`~daemon.checkpoint.batch_logs` reads Spark's offset and commit logs (which
micro-batches were planned and committed, and where each ended);
:mod:`~daemon.checkpoint.due_times` is the buckets' due-time map that the sink writes and
the source's planner reads. The source and the sink both use them, so they sit below both;
they import only the vocabulary (:mod:`daemon.model`) and :mod:`daemon.private_paths`.
"""
