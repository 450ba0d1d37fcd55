"""Configuration loading: types, ranges, unknown keys, overrides, nested sections."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest

from simcore.config import apply_override, describe, load, param, parse_override, section
from simcore.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fabric:
    hop_latency_cycles: int = param(1, "cycles per hop", min=0, max=64)
    colours: int = param(24, "routing colours", min=1, max=24)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Chip:
    clock_hz: int = param(850_000_000, "clock", min=1)
    mode: Literal["fast", "reference"] = param("fast", "fidelity")
    scale: float = param(1.0, "a factor", min=0.0)
    trace: bool = param(False, "a flag")
    fabric: Fabric = section(Fabric, "the fabric")


def msg(data):
    with pytest.raises(ConfigError) as err:
        load(Chip, data)
    return str(err.value)


def test_defaults_and_nested_values():
    chip = load(Chip, {"clock_hz": 8.5e8, "fabric": {"colours": 8}})
    assert chip.clock_hz == 850_000_000 and isinstance(chip.clock_hz, int)
    assert chip.fabric == Fabric(colours=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        chip.clock_hz = 1  # type: ignore[misc]


def test_unknown_key_suggests_the_closest():
    assert msg({"fabric": {"colors": 3}}) == (
        "config key 'fabric.colors': unknown key; allowed: fabric.hop_latency_cycles, "
        "fabric.colours; did you mean 'fabric.colours'?"
    )


def test_out_of_range():
    assert msg({"fabric": {"colours": 25}}) == (
        "config key 'fabric.colours' = 25: out of range; allowed: 1 .. 24; change fabric.colours"
    )


def test_wrong_types():
    assert msg({"clock_hz": "fast"}) == (
        "config key 'clock_hz' = 'fast': expected an integer; set it with --set clock_hz=<value>"
    )
    assert msg({"clock_hz": 1.5}) == (
        "config key 'clock_hz' = 1.5: expected an integer; set it with --set clock_hz=<value>"
    )
    assert msg({"trace": 1}) == (
        "config key 'trace' = 1: expected true or false; set it with --set trace=<value>"
    )
    assert msg({"fabric": 3}) == (
        "config key 'fabric' = 3: is a section, not a value; "
        "set one of its keys, e.g. --set fabric.<key>=<value>"
    )


def test_literal_choices():
    assert msg({"mode": "refrence"}) == (
        "config key 'mode' = 'refrence': not an allowed choice; allowed: 'fast', 'reference'; "
        "did you mean 'reference'?"
    )


def test_overrides_parse_toml_literals_and_nest():
    data: dict = {}
    apply_override(data, "fabric.colours=4")
    apply_override(data, "mode=reference")
    apply_override(data, "scale=0.5")
    apply_override(data, "trace=true")
    assert data == {"fabric": {"colours": 4}, "mode": "reference", "scale": 0.5, "trace": True}
    assert load(Chip, data).fabric.colours == 4
    assert parse_override("name = some text") == ("name", "some text")


def test_malformed_override():
    with pytest.raises(ConfigError) as err:
        parse_override("colours")
    assert str(err.value) == (
        "config key 'colours': an override must look like KEY=VALUE; e.g. --set elements=64"
    )
    data = {"mode": "fast"}
    with pytest.raises(ConfigError) as err:
        apply_override(data, "mode.x=1")
    assert str(err.value) == "config key 'mode' = 'fast': is a value, not a section; drop 'mode.x'"


def test_describe_lists_every_leaf():
    keys = [row[0] for row in describe(Chip)]
    assert keys == [
        "clock_hz", "mode", "scale", "trace", "fabric.hop_latency_cycles", "fabric.colours",
    ]  # fmt: skip
    assert describe(Chip)[4] == ("fabric.hop_latency_cycles", "1", "0 .. 64", "cycles per hop")
