"""Command-line plumbing for `llmload.cli`: flag bounds, the help's look, one-line usage errors.

- Every numeric flag has bounds (`min`/`max` on its option): `--processes -5` or `--port 99999` is a
  usage error (exit 2) before anything starts, never a traceback or a run against nothing.
- Boolean flags show no `<bool>` metavar in `--help` (`--web / --no-web` says it already); the usage line
  names a required argument in capitals (`Usage: llmload run [OPTIONS] CONFIG`, where Typer 0.29 writes
  `{config}`).
- A usage error is one line on stderr: `llmload: error: Invalid value for '--processes': ... (see llmload run
  --help)`.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["MAX_PROCESSES", "MAX_SEED", "FlagsApp", "FlagsCommand", "FlagsGroup", "check_target_url",
           "show_usage_error"]

#: most local processes, workers, slots or threads a flag takes
MAX_PROCESSES = 1024
MAX_SEED = 2**63 - 1


def _without_flag_metavar(params: list[Any]) -> list[Any]:
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class FlagsCommand(TyperCommand):
    """A command whose boolean flags (`--help` included) show no type in the help, and whose usage line
    names its required arguments in capitals."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_metavar(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [_usage_name(piece) for piece in super().collect_usage_pieces(ctx)]


def _usage_name(piece: str) -> str:
    """`{run_dir}` (Typer's required argument) -> `RUN_DIR`; `[OPTIONS]` and the rest unchanged."""
    if piece.startswith("{") and "}" in piece:
        name, _, rest = piece[1:].partition("}")
        return name.upper() + rest
    return piece


class FlagsGroup(TyperGroup):
    """The group: the same for its own `--help`."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_metavar(super().get_params(ctx))


class FlagsApp(typer.Typer):
    """`typer.Typer` whose commands are `FlagsCommand`s unless told otherwise, and whose click command is
    built once."""

    _built: tuple[tuple, Any] | None = None

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", FlagsCommand)
        return super().command(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the app as `typer.Typer` does, with the click command built on the first call and kept
        (built again if a command is registered later). Building it reads every command's signature and
        type hints: ~13 ms, which the `llmload` process pays once and a caller that runs the app many
        times in one process (`llmload.cli.main` in the tests) paid at every call. With Typer's pretty
        tracebacks on, Typer's own call (which marks an escaping exception for them)."""
        if self.pretty_exceptions_enable:
            return super().__call__(*args, **kwargs)
        registered = (tuple(self.registered_commands), tuple(self.registered_groups), self.registered_callback)
        if self._built is None or self._built[0] != registered:
            self._built = (registered, typer.main.get_command(self))
        return self._built[1](*args, **kwargs)


def check_target_url(value: str | None) -> str | None:
    """Option callback: a target URL must be an http(s) URL with a host and a valid port."""
    if value is None:
        return value
    from llmload.config import check_url

    try:
        return check_url(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def show_usage_error(exc: Any) -> int:
    """Print a click usage error as one line (help when no arguments were given); its exit code."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        exc.show()
        return 2
    ctx, names = getattr(exc, "ctx", None), list[str]()
    while ctx is not None and ctx.parent is not None:  # the subcommand(s), not argv[0]
        names.insert(0, ctx.info_name)
        ctx = ctx.parent
    message = " ".join(str(exc.format_message()).splitlines())
    print(f"llmload: error: {message} (see {' '.join(['llmload', *names, '--help'])})", file=sys.stderr)
    return int(getattr(exc, "exit_code", 2) or 2)
