"""The one line, and the traceback, of a query that failed in a Spark task."""

from __future__ import annotations

from daemon.errors import failure_reason, task_traceback

# The shape of a Python exception raised in a Spark task, as a failed query reports it: Spark's
# preamble, the worker's traceback, then the JVM's stack after a blank line.
SPARK_TEXT = (
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted due to "
    "stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 "
    "(TID 5) (host executor driver): org.apache.spark.api.python.PythonException: "
    "[PYTHON_EXCEPTION] An exception was thrown from the Python worker. Please see the stack "
    "trace below.\n"
    "Traceback (most recent call last):\n"
    '  File "worker.py", line 2000, in main\n'
    "    process()\n"
    '  File "daemon/operator/core.py", line 222, in _store\n'
    "    pickled = log.dumps(state)\n"
    "TypeError: cannot pickle 'generator' object\n"
    "\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException\n"
    "\tat org.apache.spark.sql.execution.python.PythonArrowOutput\n"
)


def test_a_python_exception_in_a_task_is_its_class_and_message() -> None:
    assert failure_reason(SPARK_TEXT) == "TypeError: cannot pickle 'generator' object"


def test_the_tasks_traceback_is_the_workers_without_sparks_text_around_it() -> None:
    assert task_traceback(SPARK_TEXT) == (
        "Traceback (most recent call last):\n"
        '  File "worker.py", line 2000, in main\n'
        "    process()\n"
        '  File "daemon/operator/core.py", line 222, in _store\n'
        "    pickled = log.dumps(state)\n"
        "TypeError: cannot pickle 'generator' object"
    )


def test_a_chained_exception_keeps_both_tracebacks_and_reports_the_last() -> None:
    text = (
        "PythonException: Traceback (most recent call last):\n"
        '  File "a.py", line 1, in f\n'
        "KeyError: 'x'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in f\n'
        "ValueError: no x\n"
        "\tat org.apache.spark.Something\n"
    )
    assert failure_reason(text) == "ValueError: no x"
    traceback = task_traceback(text)
    assert traceback is not None
    assert traceback.startswith("Traceback (most recent call last):")
    assert "KeyError: 'x'" in traceback
    assert traceback.endswith("ValueError: no x")


def test_text_without_a_traceback_gives_its_first_line_and_no_traceback() -> None:
    assert failure_reason("boom\nat line 3") == "boom"
    assert task_traceback("boom\nat line 3") is None


def test_secrets_in_a_tasks_error_are_masked() -> None:
    from daemon.secrets import remember_value

    remember_value("s3cret-in-task")
    text = SPARK_TEXT.replace("'generator' object", "s3cret-in-task")
    assert "s3cret-in-task" not in failure_reason(text)
    assert "s3cret-in-task" not in (task_traceback(text) or "")
