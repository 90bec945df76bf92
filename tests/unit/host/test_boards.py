"""A cap a board cannot set is refused at planning, in one line naming what to change (host/boards.py)."""

import pytest

from stackbench.host import boards

RTX_4090 = "NVIDIA GeForce RTX 4090"


def test_100_watts_on_an_rtx_4090_is_below_its_lowest_limit():
    why = boards.cap_error(RTX_4090, 100.0)
    assert why.startswith("100 W is below the NVIDIA GeForce RTX 4090's lowest power limit 150 W")
    assert "hardware.gpu.power_limit_w" in why and "\n" not in why


@pytest.mark.parametrize("cap", [150.0, 250.0, 450.0, 600.0])
def test_a_4090_accepts_caps_up_to_the_600_watts_many_boards_allow(cap):
    assert boards.cap_error(RTX_4090, cap) is None


def test_above_the_highest_known_limit_is_refused_and_an_unknown_highest_is_not_guessed():
    assert "above the NVIDIA RTX A6000's highest power limit 300 W" in boards.cap_error("NVIDIA RTX A6000", 350.0)
    assert boards.cap_error("NVIDIA GeForce RTX 3090", 450.0) is None  # partner boards differ: the GPU decides
    assert boards.cap_error("NVIDIA GeForce RTX 3090", 90.0) is not None
    assert boards.cap_error("Some Future GPU", 5.0) is None


def test_the_nodes_stated_range_wins_over_the_models():
    assert boards.cap_error(RTX_4090, 100.0, [100.0, 450.0]) is None
    assert boards.cap_error(RTX_4090, 500.0, [150.0, 450.0]) == \
        "500 W is outside the GPU's range 150-450 W (hardware.gpu.power_limit_w)"


def test_every_listed_range_holds_the_stock_limit():
    for model, (low, high) in boards.LIMITS_W.items():
        stock = boards.BOARD_POWER_W[model]
        assert (low or 0) < stock <= (high or stock)
