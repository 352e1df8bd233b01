"""``daemon verify``'s report: tables for people, one JSON document for CI pipelines."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from daemon.verify.check import JoinerCheck, Row
from daemon.verify.plan import LONG_BATCH_MS
from daemon.verify.run import VerifyReport
from daemon.verify.zombie import Zombie

BROKER_FAULT = "broker's fault"


def verdict_line(report: VerifyReport) -> str:
    """The last line: what the run proves."""
    if report.ok:
        leaked = sum(sum(check.broker_leaked.values()) for check in report.checks)
        extra = (
            f"; the broker handed {leaked} aborted record(s) to read_committed readers "
            "(its fault, not enrichd's: see above)"
            if leaked
            else ""
        )
        return (
            f"PASS: exactly once through {len(report.kills)} kill -9(s): nothing lost, "
            f"nothing duplicated{extra}"
        )
    return "FAIL: see the rows not marked ok above"


def show(report: VerifyReport, console: Console) -> None:
    """Print the report as tables."""
    for check in report.checks:
        console.print(_joiner_table(check))
        for example in check.examples[:6]:
            console.print(f"  {example}", markup=False, highlight=False)
        if check.final_totals_wrong:
            console.print(f"  final totals wrong for: {', '.join(check.final_totals_wrong)}")
    kills = Table(title="restarts", title_justify="left")
    for column in ("kill", "at s", "input planned", "after", "delay s", "back in s"):
        kills.add_column(column, justify="right")
    for kill in report.kills:
        kills.add_row(
            str(kill.number),
            f"{kill.at_s:g}",
            f"{kill.consumed} of {report.input_records}",
            kill.after,
            f"{kill.delay_s:g}",
            "-" if kill.recovered_s is None else f"{kill.recovered_s:g}",
        )
    console.print(kills)
    for line in summary_lines(report):
        # Unwrapped: a warning with its fix stays one line a CI log can be searched for.
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    style = "bold green" if report.ok else "bold red"
    console.print(verdict_line(report), style=style, markup=False, highlight=False)


def summary_lines(report: VerifyReport) -> list[str]:
    """The lines under the tables: rates, the stop, the broker, its transactions."""
    rate = report.input_records / report.run_s if report.run_s else 0.0
    lines = [
        f"rates: {report.input_records} input records in {report.run_s:g} s including "
        f"{len(report.kills)} kill(s) and {report.starts} start(s): {rate:.0f} records/s; "
        f"{report.output_records} output records",
        f"input: {report.input_at_start} record(s) produced before daemon run started, "
        f"{report.input_records - report.input_at_start} while it ran",
        f"stop: SIGTERM, daemon run exited with code {report.stop_exit_code}",
    ]
    if report.options.mode == "continuous":
        lines.append(
            f"mode: continuous, long batches of {LONG_BATCH_MS / 1000:g} s; a restart's "
            '"input planned" is what committed sub-batches had read (the pipelines\' groups)'
        )
    lines.append(replays_line(report))
    if report.zombie is not None:
        lines.append(zombie_line(report.zombie))
    lines += [f"broker: {line}" for line in report.broker.summary()]
    lines.append(f"raw record batches: {report.raw_batches}")
    for topic, counts in sorted(report.transactions.items()):
        described = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
        lines.append(f"  {topic}: {described}")
    lines += [f"held: {line}" for line in report.held]
    lines += [f"WARNING settings: {line}" for line in report.settings]
    lines += [f"note: {line}" for line in report.notes]
    if report.kept:
        lines.append(f"kept: topics under {report.prefix}.{report.run}, files in {report.kept}")
    return lines


def replays_line(report: VerifyReport) -> str:
    """Whether the replay path ran: replayed tasks found their batch committed by its marker."""
    found = report.replays_found
    if not report.kills:
        return f"replays: {found} replayed task(s) found their batch committed (no kill)"
    if found:
        return (
            f"replays: {found} replayed task(s) found their batch committed by its marker and "
            f"wrote nothing again: the replay path ran"
        )
    return (
        "replays: NO replayed task found its batch committed: the kills landed where no "
        "task had committed, so this run did not prove the replay path (run it again)"
    )


def zombie_line(zombie: Zombie) -> str:
    """What the zombie scenario saw: where the run was stopped, and what the woken run did."""
    where = "while its tasks ran" if zombie.in_flight else "after it was committed"
    return (
        f"zombie: daemon run stopped (SIGSTOP) at micro-batch {zombie.paused_batch} ({where}); "
        f"a new run committed up to {zombie.new_batch}; once resumed, {zombie.fenced_lines} "
        f"line(s) of its logs said a transaction was fenced, {zombie.replays_found} of its "
        f"tasks found their batch committed, and it {zombie.ended}"
    )


def _joiner_table(check: JoinerCheck) -> Table:
    table = Table(title=f"{check.joiner}", title_justify="left")
    for column, justify in (
        ("scenario", "left"),
        ("expected", "right"),
        ("observed", "right"),
        ("verdict", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in check.rows:
        _add(table, row)
    for row in check.dead_letters:
        _add(table, Row(f"dead letter: {row.scenario}", *_counts(row)))
    for topic, n in sorted(check.broker_leaked.items()):
        table.add_row(
            f"aborted records read_committed got ({topic})",
            "0",
            str(n),
            BROKER_FAULT,
            style="yellow",
        )
    for group, topic in sorted(check.broker_leaked_totals.items()):
        table.add_row(
            f"totals of {group} made from such a record ({topic})",
            "-",
            "-",
            BROKER_FAULT,
            style="yellow",
        )
    total = check.totals()
    _add(table, total, style="bold")
    return table


def _counts(row: Row) -> tuple[int, int, int, int, int]:
    return row.expected, row.observed, row.lost, row.duplicated, row.unexpected


def _add(table: Table, row: Row, style: str | None = None) -> None:
    table.add_row(
        row.scenario,
        str(row.expected),
        str(row.observed),
        row.verdict,
        style=style if row.ok else "red",
    )


def as_json(report: VerifyReport) -> dict[str, Any]:
    """The report as one JSON-ready document."""
    return {
        "verdict": "pass" if report.ok else "fail",
        "exit_code": report.exit_code,
        "summary": verdict_line(report),
        "run": report.run,
        "prefix": report.prefix,
        "options": {**asdict(report.options), "joiners": list(report.options.joiners)},
        "joiners": {
            check.joiner: {
                "ok": check.ok,
                "scenarios": [_row_json(row) for row in check.rows],
                "dead_letters": [_row_json(row) for row in check.dead_letters],
                "broker_fault": {
                    "aborted_records_delivered": check.broker_leaked,
                    "totals_made_from_them": check.broker_leaked_totals,
                },
                "final_totals_wrong": check.final_totals_wrong,
                "examples": check.examples,
            }
            for check in report.checks
        },
        "restarts": [asdict(kill) for kill in report.kills],
        "replays_found": report.replays_found,
        "zombie": None if report.zombie is None else asdict(report.zombie),
        "starts": report.starts,
        "stop_exit_code": report.stop_exit_code,
        "rates": {
            "input_records": report.input_records,
            "input_at_start": report.input_at_start,
            "output_records": report.output_records,
            "seconds": report.run_s,
            "records_per_second": round(report.input_records / report.run_s, 1)
            if report.run_s
            else None,
        },
        "broker": asdict(report.broker) | {"transactions_supported": report.broker.transactions},
        "raw_batches": report.raw_batches,
        "transactions": report.transactions,
        "held": report.held,
        "settings_warnings": report.settings,
        "notes": report.notes,
        "kept": report.kept,
    }


def _row_json(row: Row) -> dict[str, Any]:
    return {
        "scenario": row.scenario,
        "expected": row.expected,
        "observed": row.observed,
        "lost": row.lost,
        "duplicated": row.duplicated,
        "unexpected": row.unexpected,
        "verdict": row.verdict,
    }
