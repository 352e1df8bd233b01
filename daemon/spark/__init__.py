"""The Spark session enrichd runs on, and what its JVM and Python workers need.

:mod:`~daemon.spark.session` starts the process's one session with enrichd's settings;
:mod:`~daemon.spark.spark_log` sends Spark's own output to a log file;
:mod:`~daemon.spark.class_archive` lets a JVM start map the classes an earlier start
archived; :mod:`~daemon.spark.worker_gc` keeps garbage collection cheap in the Python
workers. Importing this package starts no JVM.
"""
