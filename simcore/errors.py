"""Errors a user can cause and fix.

Every ``WafersimError`` is a *user* error: the command line prints its message (no traceback) and
exits with status 2. The message names what is wrong (key, value, component), what is allowed and
what to change. Anything else escaping the simulator is an internal error (exit status 1).
"""

from __future__ import annotations


class WafersimError(Exception):
    """Base of all errors the user can fix; ``str(err)`` is the complete message."""


class ConfigError(WafersimError):
    """A configuration key or value is invalid."""

    def __init__(
        self,
        key: str,
        value: object,
        problem: str,
        *,
        allowed: str | None = None,
        hint: str | None = None,
        where: str | None = None,
    ) -> None:
        self.key = key
        self.value = value
        self.problem = problem
        self.allowed = allowed
        self.hint = hint
        self.where = where
        shown = "" if value is _MISSING else f" = {value!r}"
        if where:  # where the value is written ("in s.toml line 4"): shown as written there
            shown = f" = {value} {where}" if value is not _MISSING else f" {where}"
        msg = f"config key '{key}'{shown}: {problem}"
        if allowed:
            msg += f"; allowed: {allowed}"
        if hint:
            msg += f"; {hint}"
        super().__init__(msg)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
MISSING = _MISSING


class ScenarioError(WafersimError):
    """A scenario name or file cannot be used."""


class BuildError(WafersimError):
    """The simulated system is wired or parameterised wrongly (found while building or checking)."""


class TraceError(WafersimError):
    """A trace file cannot be read."""


class SimulationStalled(WafersimError):
    """The run stopped making progress while work was still pending (a deadlock)."""

    def __init__(self, message: str, blocked: list[str]) -> None:
        self.blocked = blocked
        super().__init__(message)
