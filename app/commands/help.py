"""How every ``seer`` command renders ``--help`` (one place, so a new command gets it too).

- Help text is Markdown: a docstring's single line breaks join into one paragraph (typer's
  default "rich" mode keeps them as hard breaks), a blank line starts a new paragraph.
- Flags that take no value (``--json``, ``--help``, ``--force/--no-force``) get no type tag
  (typer >= 0.2x prints ``<bool>`` as if they took one).
- Arguments read ``FILE`` (required) or ``[FILE]`` (optional) in the usage line, as in click,
  not typer's ``{file}``.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


def _untag_flags(params: list[Any]) -> list[Any]:
    """``params`` with an empty type tag on every flag (the tag is the metavar when set)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


def _usage_name(argument: Any) -> str:
    name = str(argument.metavar or argument.name).upper()
    if argument.nargs != 1:
        name += "..."
    return name if argument.required else f"[{name}]"


class SeerCommand(TyperCommand):
    """A typer command with the help conventions of this module."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untag_flags(list(super().get_params(ctx)))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        arguments = [p for p in self.get_params(ctx) if p.param_type_name == "argument"]
        return pieces + [_usage_name(a) for a in arguments]


class SeerGroup(TyperGroup):
    """A typer group (``seer``, ``seer db``) with the help conventions of this module."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untag_flags(list(super().get_params(ctx)))


class SeerTyper(typer.Typer):
    """``typer.Typer`` whose commands and sub-groups are ``SeerCommand`` / ``SeerGroup`` with
    Markdown help."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", SeerGroup)
        kwargs.setdefault("rich_markup_mode", "markdown")
        super().__init__(**kwargs)

    def command(self, name: str | None = None, *, cls: Any = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or SeerCommand, **kwargs)
