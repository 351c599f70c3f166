"""How every view writes a number: the CLI's tables, the app's tables and the HTML report share this.

One rounding rule: a value is rounded half away from zero on its shortest decimal form (the digits
it prints as), so 5.25 compactions read 5.3 everywhere. Python's own formatting rounds the binary
value half to even (5.2) and a browser's number format rounds half up (5.3); going through
`rounded` first makes both agree. The units a view shows:

- `tokens`: whole, with thousands separators (85,904);
- `count`: a mean of counts to 1 decimal, a whole count as it is (18, 1.4);
- `number`: a share, ratio or score to 3 decimals (0.864);
- `percent`: a share of 1 as a whole percent (57%);
- `dollars`: 4 decimals ($0.0123);
- `cells`: a plain count.

A missing value (None, NaN) is written "" and a value that is not a number as `str` gives it.
This module imports nothing of the workbench: every layer may use it.
"""

from __future__ import annotations

import math
import numbers
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Literal

Unit = Literal["cells", "percent", "dollars", "tokens", "count", "number"]
UNITS: tuple[Unit, ...] = ("cells", "percent", "dollars", "tokens", "count", "number")
#: Decimals shown per unit (a whole `count` or `number` is shown without any).
DECIMALS: dict[Unit, int] = {"cells": 0, "percent": 0, "dollars": 4, "tokens": 0, "count": 1, "number": 3}
#: Below this a p-value reads "<0.001".
SMALLEST_P = 0.0005
MINUS = "−"


def is_missing(value: Any) -> bool:
    """None or a float NaN (what pandas gives for a missing value)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _decimal(value: float, decimals: int) -> Decimal:
    exact = Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return exact.copy_abs() if exact == 0 else exact  # no "-0.0"


def rounded(value: float, decimals: int) -> float:
    """`value` to `decimals` places, half away from zero on the digits it prints as (`rounded(5.25, 1)`
    is 5.3, `rounded(2.675, 2)` 2.68); infinities pass through."""
    if not math.isfinite(value):
        return float(value)
    return float(_decimal(value, decimals))


def fixed(value: float, decimals: int) -> str:
    """`value` written with `decimals` places and thousands separators, by the rounding rule."""
    if not math.isfinite(value):
        return str(float(value))
    return f"{_decimal(value, decimals):,.{decimals}f}"


def tokens(value: Any) -> str:
    """A token count (or a mean of counts) as whole tokens with separators: 85,904."""
    return format_value("tokens", value)


def format_value(unit: Unit, value: Any) -> str:
    """One value as text in `unit` (see the module's list); "" when missing."""
    if is_missing(value):
        return ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    number = float(value)
    if unit == "dollars":
        return "$" + fixed(number, DECIMALS["dollars"])
    if unit == "percent":
        return fixed(number * 100, DECIMALS["percent"]) + "%"
    if unit in ("tokens", "cells") or number.is_integer():
        return fixed(number, 0)
    return fixed(number, DECIMALS[unit])


def format_signed(unit: Unit, value: Any) -> str:
    """A difference in `unit` with its sign: +1,234, −0.052, −$0.0100; zero, after rounding, unsigned."""
    if is_missing(value) or isinstance(value, bool) or not isinstance(value, numbers.Real):
        return format_value(unit, value)
    number = float(value)
    text = format_value(unit, abs(number))
    if number == 0 or text.strip("$%0.,") == "":
        return text
    return ("+" if number > 0 else MINUS) + text


def format_p_value(value: Any) -> str:
    """A p-value to 3 decimals, "<0.001" below `SMALLEST_P`; "" when missing."""
    if is_missing(value) or isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "" if is_missing(value) else str(value)
    return "<0.001" if float(value) < SMALLEST_P else fixed(float(value), 3)


def displayed_value(unit: Unit, value: Any) -> Any:
    """A number as a table that formats it itself (a browser's number format) should receive it:
    rounded here by the rule, so the view's own rounding has nothing left to decide."""
    if is_missing(value) or isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    if unit == "percent":
        return rounded(float(value) * 100, DECIMALS["percent"])
    return rounded(float(value), DECIMALS[unit])
