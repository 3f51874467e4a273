import math

import pytest

from core.bounds import check_range


def test_inside_closed_and_open_bounds() -> None:
    check_range("a", 0, 0, 1)
    check_range("a", 1, 0, 1)
    check_range("a", 5)  # no bounds
    check_range("a", 0.5, 0, 1, lo_open=True, hi_open=True)


@pytest.mark.parametrize(
    "value,kw,msg",
    [
        (0, {"lo": 0, "hi": 1, "lo_open": True}, "a=0 outside (0, 1]"),
        (1, {"lo": 0, "hi": 1, "hi_open": True}, "a=1 outside [0, 1)"),
        (0, {"lo": 1}, "a=0 outside [1, inf]"),
        (20_000_000, {"lo": 1, "hi": 10_000_000}, "a=20000000 outside [1, 10000000]"),
        (0.04, {"lo": 0.05, "hi": 3.0}, "a=0.04 outside [0.05, 3]"),
        (math.nan, {"lo": 0, "hi": 1}, "a=nan outside [0, 1]"),
    ],
)
def test_outside_names_field_value_and_bounds(value: float, kw: dict, msg: str) -> None:
    with pytest.raises(ValueError) as err:
        check_range("a", value, **kw)
    assert str(err.value) == msg
