"""Configuration loading: types, ranges, unknown keys, overrides, nested sections."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import pytest

from simcore.config import (
    apply_override,
    describe,
    load,
    param,
    parse_override,
    section,
    toml_literal,
)
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shown:
    step: int = param(8, "a step", multiple_of=8)
    shape: str = param("4x4", "a shape", allowed="X x Y, e.g. 4x4")
    free: str = param("", "any label")
    factor: float = param(1.0, "any factor")


def test_describe_shows_each_constraint():
    rows = {key: allowed for key, _, allowed, _ in describe(Shown)}
    assert rows == {
        "step": "a multiple of 8",  # a step alone was shown as "an integer"
        "shape": "X x Y, e.g. 4x4",
        "free": "a string",
        "factor": "a finite number",  # inf and nan are refused
    }
    with pytest.raises(ConfigError) as err:
        load(Shown, {"shape": 4})
    assert str(err.value) == (
        "config key 'shape' = 4: expected a string; allowed: X x Y, e.g. 4x4; "
        "set it with --set shape=<value>"
    )


#: What ``wafersim params`` shows for a key with no constraint but its type.
BARE = {"a string", "an integer", "a number", "a finite number"}
#: Registered keys whose type is their whole constraint, and why.
FREE = {
    ("wafer-program/axpy", "a"): "the scalar of y = a·x + y: any finite number",
}


def _kind_classes():
    from runner import registry
    from workloads.wafer import program

    registry.load_all()
    out = [(name, kind.params) for name, kind in sorted(registry.KINDS.items())]
    for path in sorted((Path(program.__file__).parent / "kernels").glob("*.py")):
        out.append((f"wafer-program/{path.stem}", program.ProgramParams.for_data(
            {"program": str(path)})))  # fmt: skip
    return out


@pytest.mark.parametrize(("name", "cls"), _kind_classes(), ids=lambda v: getattr(v, "__name__", v))
def test_params_show_the_real_constraint_of_every_key(name, cls):
    """``wafersim params KIND`` says what each key may be (a range, the choices, a multiple, a
    file, or the form in words), never just its type (issue 27: topology, chip, src, dst, axes,
    sparsity, density, degree and address_mapping showed "a string" or "a number")."""
    bare = [(key, allowed) for key, _, allowed, _ in describe(cls)
            if allowed in BARE and (name, key) not in FREE]  # fmt: skip
    assert not bare, name


def test_toml_literal_finds_a_key_as_written():
    text = (
        'kind = "x"\n'
        "topology = 0x4   # hex\n"
        "[ici]\n"
        "packet_bytes = 0o17\n"
        '"a" . b = 0b1\n'
        "[wafer.pe]\n"
        "x = {y = 0x10, z = 3}\n"
    )
    assert toml_literal(text, "topology") == (2, "0x4")
    assert toml_literal(text, "ici.packet_bytes") == (4, "0o17")
    assert toml_literal(text, "ici.a.b") == (5, "0b1")
    assert toml_literal(text, "wafer.pe.x.y") == (7, "0x10")  # in an inline table
    assert toml_literal(text, "packet_bytes") is None  # under [ici], not at the top
    assert toml_literal(text, "nope") is None
