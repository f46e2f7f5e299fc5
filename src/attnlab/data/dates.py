"""Human-readable dates paired with ISO dates: the translation task of chapters 1, 2 and 6.

Introduced in chapter 1. "september 27, 1994", "27 Sep 1994", "Tue, 27/09/94" and
"1994年9月27日" all translate to "1994-09-27". The task is small enough to train in seconds on a
CPU, and its alignments are easy to read: the year digits of the output come from the year of
the input, wherever the format puts it.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Sequence

from attnlab.validation import check_int

__all__ = ["DATE_FORMATS", "FIRST_DAY", "LAST_DAY", "date_spans", "detect_format", "format_date", "make_date_pairs"]

FIRST_DAY = dt.date(1950, 1, 1)
LAST_DAY = dt.date(2049, 12, 31)  # two-digit years 50..99 are 19xx, 00..49 are 20xx

_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


Part = tuple[str, str]  # (label, text): label is "year", "month", "day", "weekday" or "" for punctuation


def _y(d: dt.date) -> Part:
    return ("year", str(d.year))


def _m(text: str) -> Part:
    return ("month", text)


def _d(text: str) -> Part:
    return ("day", text)


def _w(text: str) -> Part:
    return ("weekday", text)


def _s(text: str) -> Part:
    return ("", text)


def _month_name(d: dt.date) -> str:
    return _MONTHS[d.month - 1]


# Each format writes a date as labelled parts, so that the source span of the year, the month and
# the day is known exactly (chapter 2 checks where attention looks). The comment shows 1994-09-27.
_FORMAT_PARTS: dict[str, Callable[[dt.date], list[Part]]] = {
    "long": lambda d: [_m(_month_name(d)), _s(" "), _d(str(d.day)), _s(", "), _y(d)],  # september 27, 1994
    "day_month_abbr": lambda d: [_d(str(d.day)), _s(" "), _m(_month_name(d)[:3].title()), _s(" "), _y(d)],
    "weekday_numeric": lambda d: [  # Tue, 27/09/94
        _w(_DAYS[d.weekday()][:3].title()),
        _s(", "),
        _d(f"{d.day:02d}"),
        _s("/"),
        _m(f"{d.month:02d}"),
        _s("/"),
        ("year", f"{d:%y}"),
    ],
    "chinese": lambda d: [_y(d), _s("年"), _m(str(d.month)), _s("月"), _d(str(d.day)), _s("日")],  # 1994年9月27日
    "dotted": lambda d: [_d(f"{d.day:02d}"), _s("."), _m(f"{d.month:02d}"), _s("."), _y(d)],  # 27.09.1994
    "us_numeric": lambda d: [_m(f"{d.month:02d}"), _s("/"), _d(f"{d.day:02d}"), _s("/"), _y(d)],  # 09/27/1994
    "dashed_abbr": lambda d: [_d(f"{d.day:02d}"), _s("-"), _m(_month_name(d)[:3]), _s("-"), _y(d)],  # 27-sep-1994
    "weekday_long": lambda d: [  # Tuesday, September 27, 1994
        _w(_DAYS[d.weekday()].title()),
        _s(", "),
        _m(_month_name(d).title()),
        _s(" "),
        _d(str(d.day)),
        _s(", "),
        _y(d),
    ],
    "ordinal": lambda d: [_s("the "), _d(_ordinal(d.day)), _s(" of "), _m(_month_name(d)), _s(" "), _y(d)],
    "day_month_long": lambda d: [_d(str(d.day)), _s(" "), _m(_month_name(d)), _s(" "), _y(d)],  # 27 september 1994
    "short_us": lambda d: [_m(_month_name(d)[:3]), _s(" "), _d(str(d.day)), _s(" "), ("year", f"{d:%y}")],
    "compact": lambda d: [_y(d), _m(f"{d.month:02d}"), _d(f"{d.day:02d}")],  # 19940927
}


def _joined(parts: Callable[[dt.date], list[Part]]) -> Callable[[dt.date], str]:
    return lambda d: "".join(text for _, text in parts(d))


DATE_FORMATS: dict[str, Callable[[dt.date], str]] = {name: _joined(parts) for name, parts in _FORMAT_PARTS.items()}


def format_date(day: dt.date, fmt: str) -> str:
    """Write ``day`` in the surface format ``fmt`` (a key of ``DATE_FORMATS``).

    Raises:
        TypeError: ``day`` is not a ``datetime.date``.
        ValueError: ``fmt`` is not a known format name.
    """
    if not isinstance(day, dt.date):
        raise TypeError(f"format_date: day must be a datetime.date, got {type(day).__name__}")
    if fmt not in DATE_FORMATS:
        raise ValueError(f"format_date: unknown format {fmt!r}; known formats: {sorted(DATE_FORMATS)}")
    return DATE_FORMATS[fmt](day)


def date_spans(day: dt.date, fmt: str) -> dict[str, tuple[int, int]]:
    """Where the year, the month and the day stand in ``format_date(day, fmt)``.

    Defined in chapter 2, to check alignments. Spans are ``(start, end)`` character indices,
    end excluded: for ``"27 Sep 1994"``, the year is ``(7, 11)``.
    """
    format_date(day, fmt)  # the same argument checks
    spans, position = {}, 0
    for label, text in _FORMAT_PARTS[fmt](day):
        if label in ("year", "month", "day"):
            spans[label] = (position, position + len(text))
        position += len(text)
    return spans


def detect_format(source: str, target: str) -> str:
    """The name of the format in which ``source`` writes the ISO date ``target`` (chapters 1, 2)."""
    day = dt.date.fromisoformat(target)
    for name in DATE_FORMATS:
        if format_date(day, name) == source:
            return name
    raise ValueError(f"detect_format: {source!r} is not {target} in any known format")


def make_date_pairs(
    n_train: int = 45_000,
    n_test: int = 5_000,
    *,
    seed: int = 0,
    formats: Sequence[str] | None = None,
    held_out_fraction: float = 0.1,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Training and held-out ``(human-readable, ISO)`` date pairs.

    Defined in chapter 1. The days from 1950-01-01 to 2049-12-31 are split once, by a fixed
    rule that does not depend on ``seed``, into training days and held-out days
    (``held_out_fraction`` of them): no held-out date ever occurs in training, in any format.
    Each pair then draws a day from its side of the split and a format uniformly.

    Args:
        n_train, n_test: numbers of pairs.
        seed: seeds the draw of days and formats (not the split).
        formats: format names to use (default: all of ``DATE_FORMATS``).
        held_out_fraction: the share of days kept for the held-out set, in (0, 1).

    Returns:
        ``(train, test)``: two lists of ``(source, target)`` string pairs.

    Raises:
        TypeError: a count is not an int.
        ValueError: a count is negative, a format is unknown, or the fraction is outside (0, 1).
    """
    check_int("make_date_pairs", "n_train", n_train, low=0)
    check_int("make_date_pairs", "n_test", n_test, low=0)
    formats = list(DATE_FORMATS) if formats is None else list(formats)
    if not formats:
        raise ValueError("make_date_pairs: formats must name at least one format")
    unknown = [f for f in formats if f not in DATE_FORMATS]
    if unknown:
        raise ValueError(f"make_date_pairs: unknown formats {unknown}; known formats: {sorted(DATE_FORMATS)}")
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"make_date_pairs: held_out_fraction must be in (0, 1), got {held_out_fraction}")

    days = [FIRST_DAY + dt.timedelta(n) for n in range((LAST_DAY - FIRST_DAY).days + 1)]
    random.Random(2024).shuffle(days)  # the fixed split: the same for every seed
    n_held = round(len(days) * held_out_fraction)
    held_out, training = days[:n_held], days[n_held:]

    rng = random.Random(seed)

    def draw(pool: list[dt.date], n: int) -> list[tuple[str, str]]:
        pairs = []
        for _ in range(n):
            day = rng.choice(pool)
            pairs.append((format_date(day, rng.choice(formats)), day.isoformat()))
        return pairs

    return draw(training, n_train), draw(held_out, n_test)
