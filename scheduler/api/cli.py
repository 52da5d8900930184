"""How every Tessera command line behaves: `tessera`, `kubectl-tessera`, `tessera-scheduler`,
`tessera-agent` and `tessera-device-plugin` share it, so a user meets one style everywhere.

- A mistake of the user (unknown option, bad value, missing file, no kubeconfig) is one line on stderr,
  `error: <what is wrong and what to do>`, and exit status 2. A failure of something else (the cluster
  unreachable, a check that found problems) is the same line with status 1. Never a traceback:
  `TESSERA_DEBUG=1` shows one for a bug report.
- `--version` on every entry point.
- Help is plain text that fits 80 columns, flags shown without a type (`--once`, not `--once <bool>`).
- Options are checked before any work starts (`parse_*` helpers below raise `typer.BadParameter`).

The module is in `scheduler.api` because the three components share only that package.
"""

from __future__ import annotations

import copy
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

try:  # typer >= 0.20 vendors click
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover - older typer with click installed
    from click import exceptions as _click_exc  # type: ignore[no-redef]

USAGE = 2  # exit status of a user's mistake
FAILURE = 1  # exit status of anything else that went wrong
HELP_WIDTH = 80
CONTEXT_SETTINGS: dict[str, Any] = {"max_content_width": HELP_WIDTH, "help_option_names": ["-h", "--help"]}


class CommandError(Exception):
    """Raise anywhere below a command to end it with `error: <message>` and `code` (no traceback)."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


PIPED_WIDTH = 250  # a table's width limit when the output is not a terminal (no COLUMNS set)


def output_console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """The console a command prints to. At a terminal: its width. Piped or captured: text is never
    hard-wrapped (a line stays one line, for grep and less), and tables get the width they need, up to
    PIPED_WIDTH columns (or COLUMNS, when set)."""
    probe = Console(stderr=stderr)
    if probe.is_terminal or "width" in kwargs:
        return Console(stderr=stderr, **kwargs)
    width = PIPED_WIDTH if not os.environ.get("COLUMNS", "").isdigit() else None
    return Console(stderr=stderr, soft_wrap=True, width=width, **kwargs)


def error_line(message: str) -> None:
    """Print `error: <message>` on stderr, on one line whatever the terminal width."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")


def warning_line(message: str) -> None:
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[yellow]warning:[/] {escape(message)}")


def fail(message: str, code: int = USAGE) -> typer.Exit:
    """Print the error line and return the Exit to raise: `raise fail("...")`."""
    error_line(message)
    return typer.Exit(code)


def package_version() -> str:
    try:
        return dist_version("tessera")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


def _print_version(ctx: typer.Context, _param: Any, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        typer.echo(f"{ctx.find_root().info_name} {package_version()}")
        raise typer.Exit()


VersionOption = Annotated[
    bool,
    typer.Option(
        "--version",
        callback=_print_version,
        is_eager=True,
        expose_value=True,
        help="Print the version and exit.",
    ),
]


# Typer checks option values with pydantic, whose messages ("Input should be a valid integer, unable to
# parse string as an integer") name a library's notions: each type of error in the house's words.
_VALUE_ERRORS: dict[str, str] = {
    "int_parsing": "{input!r} is not a whole number",
    "int_from_float": "{input!r} is not a whole number",
    "float_parsing": "{input!r} is not a number",
    "bool_parsing": "{input!r} is not true or false",
    "greater_than_equal": "{input} is below the smallest value accepted, {ge}",
    "greater_than": "{input} must be more than {gt}",
    "less_than_equal": "{input} is above the largest value accepted, {le}",
    "less_than": "{input} must be less than {lt}",
    "finite_number": "{input!r} is not a finite number",
}


def _value_error(exc: Any) -> str | None:
    """The house wording of a pydantic error behind a bad option value, or None."""
    errors = getattr(getattr(exc, "__cause__", None), "errors", None)
    if not callable(errors):
        return None
    try:
        err = errors()[0]
        template = _VALUE_ERRORS.get(err["type"])
        return template.format(input=err.get("input"), **(err.get("ctx") or {})) if template else None
    except (IndexError, KeyError, TypeError, ValueError):
        return None


def _usage_line(exc: Any) -> str:
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else ""
    plain = _value_error(exc)
    if plain is not None:
        exc.message = plain  # click's BadParameter words the option around it
    message = exc.format_message().strip().rstrip(".")
    if message[:2] != message[:2].upper():  # "No such option" -> "no such option"; keep "GPU ..."
        message = message[:1].lower() + message[1:]
    return f"{where}: {message} (see {where} --help)" if where else message


def _handle(call: Callable[[], Any], prog_name: str) -> NoReturn:
    """Run a command in non-standalone mode and turn every outcome into the house exit."""
    debug = os.environ.get("TESSERA_DEBUG", "") not in ("", "0")
    try:
        rv = call()
    except _click_exc.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        sys.exit(0)
    except _click_exc.ClickException as exc:
        error_line(_usage_line(exc))
        sys.exit(exc.exit_code if exc.exit_code else USAGE)
    except CommandError as exc:
        if debug:
            traceback.print_exc()
        error_line(exc.message)
        sys.exit(exc.code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(130)
    except BrokenPipeError:  # `tessera ... | head`: the reader left; nothing to report
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stderr at exit
        sys.exit(FAILURE)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        error_line(
            f"{prog_name} failed: {type(exc).__name__}: {first_line(exc)} (TESSERA_DEBUG=1 shows where)"
        )
        sys.exit(FAILURE)
    sys.exit(rv if isinstance(rv, int) else 0)


def _house_main(
    parent: Callable[..., Any],
    args: Sequence[str] | None,
    prog_name: str | None,
    complete_var: str | None,
    standalone_mode: bool,
    extra: dict[str, Any],
) -> Any:
    if not standalone_mode:
        return parent(
            args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra
        )
    name = prog_name or os.path.basename(sys.argv[0] or "tessera")
    _handle(
        lambda: parent(
            args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra
        ),
        name,
    )


def _version_param(command: Any) -> Any:
    return next((p for p in command.params if "--version" in (getattr(p, "opts", None) or ())), None)


class HouseGroup(TyperGroup):
    """Typer's group, but however it is invoked (console script, CliRunner, `python -m`), errors come
    out in the house style, and every command below a root with `--version` has it too (`tessera
    simulate --version`)."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        mine = _version_param(self)
        if command is not None and mine is not None and _version_param(command) is None:
            inherited = copy.copy(mine)
            inherited.expose_value = False  # the command's function takes no `version` argument
            command.params.append(inherited)
        return command

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        return _house_main(super().main, args, prog_name, complete_var, standalone_mode, extra)


class HouseCommand(TyperCommand):
    """`HouseGroup` for apps of one command."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        return _house_main(super().main, args, prog_name, complete_var, standalone_mode, extra)


def new_app(help_text: str | None = None, **kwargs: Any) -> typer.Typer:
    """A Typer app in the house style (plain help at 80 columns, one-line errors, no completion
    installer). Single-command apps take `cls=HouseCommand` on their `@app.command()`."""
    return typer.Typer(
        help=help_text,
        cls=HouseGroup,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings=CONTEXT_SETTINGS,
        **kwargs,
    )


def run(app: typer.Typer, prog_name: str, args: Sequence[str] | None = None) -> NoReturn:
    """Run `app` as a console script; exits with the command's status."""
    command = typer.main.get_command(app)
    _handle(lambda: command.main(args=list(args) if args is not None else None, prog_name=prog_name,
                                 standalone_mode=False), prog_name)  # fmt: skip


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def yaml_problem(exc: BaseException) -> str:
    """A YAML parse error in one line with where it is: `line 3, column 9: mapping values are not allowed
    here` (PyYAML's message puts the place on a later line, which one-line errors used to drop)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if mark is None or not problem:
        return first_line(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None and problem != context:
        return f"{where}: {problem} ({context} on line {context_mark.line + 1})"
    return f"{where}: {problem}"


# ------------------------------------------------------------------------------- option checks
def check_writable(path: Path | None, option: str) -> None:
    """Fail now, not after a long run, when `path` cannot be written (its folder missing or read-only)."""
    if path is None:
        return
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a directory; give a file name", param_hint=option)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise typer.BadParameter(f"cannot write {path}: folder {folder} does not exist", param_hint=option)
    if path.exists() and not os.access(path, os.W_OK):
        raise typer.BadParameter(f"cannot write {path}: permission denied", param_hint=option)
    if not path.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"cannot write {path}: folder {folder} is not writable", param_hint=option)


def check_choice(value: str, choices: Sequence[str], option: str) -> str:
    if value not in choices:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}", param_hint=option)
    return value
