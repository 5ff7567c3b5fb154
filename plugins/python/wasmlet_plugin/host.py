"""What the host offers every plugin: its configuration, the agent's log and the clock."""

from wit_world.imports import host as _host
from wit_world.imports.host import Level

__all__ = ["Level", "config", "config_all", "log", "debug", "info", "warn", "error", "now_ns"]


def config(key: str, default: str | None = None) -> str | None:
    """The plugin's configuration value for ``key``, or ``default`` when it has none."""
    value = _host.config(key)
    return default if value is None else value


def config_all() -> dict[str, str]:
    """Every configuration value the plugin was given."""
    return dict(_host.config_all())


def log(level: Level, message: str, **fields: object) -> None:
    """A structured line in the agent's log, tagged with the plugin's name."""
    _host.log(level, message, [(k, str(v)) for k, v in sorted(fields.items())])


def debug(message: str, **fields: object) -> None:
    log(Level.DEBUG, message, **fields)


def info(message: str, **fields: object) -> None:
    log(Level.INFO, message, **fields)


def warn(message: str, **fields: object) -> None:
    log(Level.WARN, message, **fields)


def error(message: str, **fields: object) -> None:
    log(Level.ERROR, message, **fields)


def now_ns() -> int:
    """Wall-clock time in nanoseconds since the Unix epoch."""
    return _host.now()
