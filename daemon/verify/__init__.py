"""``daemon verify``: exactly-once output proven on a cluster, with kill -9s and a known answer.

:mod:`~daemon.verify.run` composes the rest: a workload per joiner
(:mod:`~daemon.verify.workload`) and the answer its joiner's logic gives
(:mod:`~daemon.verify.answer`), planned as pipelines (:mod:`~daemon.verify.plan`) whose
topics and workloads it writes (:mod:`~daemon.verify.cluster`); a child ``daemon run`` that it
kills and restarts (:mod:`~daemon.verify.kills`, :mod:`~daemon.verify.child`,
:mod:`~daemon.verify.child_file`); the outputs read back as a
``read_committed`` consumer and as raw record batches (:mod:`~daemon.verify.readback`,
:mod:`~daemon.verify.protocol`, :mod:`~daemon.verify.batches`); the strict check
(:mod:`~daemon.verify.check`); what the broker says of itself (:mod:`~daemon.verify.facts`);
refusals as the ACL they miss (:mod:`~daemon.verify.acl`); and the report
(:mod:`~daemon.verify.report`).
"""
