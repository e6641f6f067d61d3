"""Cron expressions for the usage window that resets on a schedule (``usageParams.windowType: cron``).

The syntax KAI's usage client takes (the supercronic ``cronexpr`` package): five fields ``minute hour
day-of-month month day-of-week``, six (a trailing ``year``) or seven (a leading ``second``); the macros
``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight`` and ``@hourly``; in a field ``*``
(``?`` in the day fields), a value, a range ``a-b``, a step ``*/n`` or ``a-b/n`` or ``a/n``, a list ``a,b``;
month and weekday names (``JAN``, ``MON``) and ``7`` for Sunday. As in cron, when both the day of the month and the
day of the week are restricted, a day matching either matches. ``L``, ``W`` and ``#`` are not supported (an error
names them). Times are UTC.

:func:`parse_cron` raises :class:`CronError` with a sentence naming the field; :meth:`CronExpression.previous`
is the latest occurrence at or before a time (the start of the current window).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["CronError", "CronExpression", "parse_cron"]

MACROS = {
    "@yearly": "0 0 0 1 1 * *", "@annually": "0 0 0 1 1 * *", "@monthly": "0 0 0 1 * * *",
    "@weekly": "0 0 0 * * 0 *", "@daily": "0 0 0 * * * *", "@midnight": "0 0 0 * * * *", "@hourly": "0 0 * * * * *",
}
MONTHS = {m: i + 1 for i, m in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT",
                                          "NOV", "DEC"))}
WEEKDAYS = {d: i for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
#: (name, lowest, highest, names) of the seven fields
FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}), ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
    ("month", 1, 12, MONTHS), ("day of week", 0, 7, WEEKDAYS), ("year", 1970, 2099, {}),
)
#: how far back :meth:`CronExpression.previous` looks (an expression that matches no day in that span never fires)
SEARCH_YEARS = 8


class CronError(ValueError):
    """A cron expression that does not parse (the sentence names the field)."""


@dataclass(frozen=True, slots=True)
class CronExpression:
    text: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    years: frozenset[int]
    any_day: bool  # day of month unrestricted
    any_weekday: bool  # day of week unrestricted

    def matches_day(self, day: datetime) -> bool:
        if day.month not in self.months or day.year not in self.years:
            return False
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return dow
        if self.any_weekday:
            return dom
        return dom or dow  # both restricted: either (cron)

    def previous(self, now: datetime) -> datetime | None:
        """The latest time at or before ``now`` the expression fires (None: none within :data:`SEARCH_YEARS`)."""
        now = now.astimezone(UTC).replace(microsecond=0)
        day = now.replace(hour=0, minute=0, second=0)
        for back in range(SEARCH_YEARS * 366 + 1):
            d = day - timedelta(days=back)
            if not self.matches_day(d):
                continue
            limit = now if back == 0 else d.replace(hour=23, minute=59, second=59)
            for hour in sorted((h for h in self.hours if h <= limit.hour), reverse=True):
                top_minute = limit.minute if hour == limit.hour else 59
                for minute in sorted((m for m in self.minutes if m <= top_minute), reverse=True):
                    top_second = limit.second if (hour, minute) == (limit.hour, limit.minute) else 59
                    seconds = [s for s in self.seconds if s <= top_second]
                    if seconds:
                        return d.replace(hour=hour, minute=minute, second=max(seconds))
        return None


def parse_cron(text: str) -> CronExpression:
    """The expression of ``text`` (:class:`CronError` when it does not parse)."""
    if not isinstance(text, str) or not text.strip():
        raise CronError("empty cron expression: expected five fields 'minute hour day-of-month month day-of-week' "
                        "or a macro such as @daily")
    raw = text.strip()
    if raw.startswith("@"):
        expanded = MACROS.get(raw.lower())
        if expanded is None:
            raise CronError(f"cron expression {raw!r}: unknown macro (known: {', '.join(sorted(MACROS))})")
        parts = expanded.split()
    else:
        parts = raw.split()
        if len(parts) == 5:
            parts = ["0", *parts, "*"]
        elif len(parts) == 6:
            parts = ["0", *parts]
        elif len(parts) != 7:
            raise CronError(f"cron expression {raw!r}: expected 5 fields (minute hour day-of-month month "
                            f"day-of-week), 6 (and year) or 7 (second first), got {len(parts)}")
    sets = [_field(raw, value, spec) for value, spec in zip(parts, FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[5])
    return CronExpression(raw, sets[0], sets[1], sets[2], sets[3], sets[4], weekdays, sets[6],
                          any_day=parts[3] in ("*", "?"), any_weekday=parts[5] in ("*", "?"))


def _field(raw: str, value: str, spec: tuple[str, int, int, dict[str, int]]) -> frozenset[int]:
    name, low, high, names = spec
    out: set[int] = set()
    for item in value.split(","):
        if any(c in item.upper() for c in "LW#") and item.upper() not in names:
            raise CronError(f"cron expression {raw!r}: {name} {item!r}: L, W and # are not supported")
        step, had_step = 1, "/" in item
        if had_step:
            item, _, step_text = item.partition("/")
            step = _number(raw, name, step_text, {})
            if step <= 0:
                raise CronError(f"cron expression {raw!r}: {name}: step {step_text!r} must be positive")
        if item in ("*", "?"):
            if item == "?" and name not in ("day of month", "day of week"):
                raise CronError(f"cron expression {raw!r}: {name}: '?' is only allowed in the day fields")
            start, end = low, high if name != "day of week" else 6
        elif "-" in item:
            a, _, b = item.partition("-")
            start, end = _number(raw, name, a, names), _number(raw, name, b, names)
        else:
            start = _number(raw, name, item, names)
            end = high if had_step else start  # "a/n": from a to the end, every n
        for v in (start, end):
            if not low <= v <= high:
                raise CronError(f"cron expression {raw!r}: {name}: {v} is out of range {low}-{high}")
        if start > end:
            raise CronError(f"cron expression {raw!r}: {name}: range {start}-{end} runs backwards")
        out.update(range(start, end + 1, step))
    return frozenset(out)


def _number(raw: str, name: str, text: str, names: dict[str, int]) -> int:
    named = names.get(text.upper())
    if named is not None:
        return named
    if not text.isdigit():
        raise CronError(f"cron expression {raw!r}: {name}: {text!r} is not a number"
                        + (f" or a name ({', '.join(names)})" if names else ""))
    return int(text)
