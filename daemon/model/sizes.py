"""Sizes in bytes as the lines enrichd prints say them."""

from __future__ import annotations


def in_words(size: int) -> str:
    """Bytes in words: ``"900 bytes"``, ``"2.1 MiB"``.

    >>> in_words(900), in_words(2_200_000), in_words(3 << 30)
    ('900 bytes', '2.1 MiB', '3.0 GiB')
    """
    amount = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "bytes" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")
