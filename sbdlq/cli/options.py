"""Options shared by several commands, declared once.

The selection options (DESIGN §5) are declared once, in `sbdlq.selection.SELECTION_OPTIONS`:
`@selection_options` puts every one in a command's signature in place of its `selection`
parameter and hands the command one `SelectionOptions`, as sqlite-utils' shared option
decorators do for click. `for_sub_queue` binds the
DLQ commands' `sub_queue` parameter, so one definition serves the DLQ and the transfer DLQ.
"""

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

import typer

from sbdlq.addresses import Address, SubQueue, parse_entity
from sbdlq.cli.completion import complete_entity, complete_output
from sbdlq.output.formats import output_help
from sbdlq.selection import SELECTION_OPTIONS, Selection, SelectionOption, build_selection

if TYPE_CHECKING:
    import click

    from sbdlq.cli.settings import Settings

SEL = "Selection"
OUT = "Output"


def output_option(help_: str, completion: Callable[..., list[str]]) -> Any:
    """`--output/-o` with the formats a command writes: shown in the Output panel of --help."""
    return typer.Option(
        "--output", "-o", help=help_, rich_help_panel=OUT, autocompletion=completion, show_default=False
    )


Output = Annotated[
    str | None,
    output_option(output_help(), complete_output),
]
QueryOpt = Annotated[
    str | None,
    typer.Option(
        "--query",
        help="JMESPath expression applied to the JSON output, as in the az CLI (jsonl: to each line).",
        rich_help_panel=OUT,
    ),
]
Entity = Annotated[
    str,
    typer.Argument(help="Queue, or TOPIC/Subscriptions/SUB.", show_default=False, autocompletion=complete_entity),
]


def count_option(flag: str, help_: str) -> Any:
    """An option taking a whole number N, at least 1 (--max, --concurrency, --batch-size)."""
    return typer.Option(flag, help=help_, min=1, metavar="N")


def unverified_routing_option(help_: str) -> Any:
    """`--allow-unverified-routing`: send to a topic whose subscriptions' rules cannot be read."""
    return typer.Option("--allow-unverified-routing", help=help_)


Yes = Annotated[bool, typer.Option("--yes", "-y", help="Don't ask (required when stdin is not a terminal).")]

# The copy options resubmit and replay both take.
Rate = Annotated[float | None, typer.Option("--rate", help="At most N messages per second.", min=0.001, metavar="N")]
Spread = Annotated[
    str | None,
    typer.Option(
        "--spread",
        help="Schedule the copies evenly over this long (e.g. 2h) instead of sending them now; "
        "the command ends once all are scheduled.",
        metavar="DURATION",
    ),
]
StartAt = Annotated[
    str | None,
    typer.Option(
        "--start-at", help="With --spread: the window starts then (ISO 8601, or a duration from now).", metavar="TIME"
    ),
]
NewMessageId = Annotated[bool, typer.Option("--new-message-id", help="Give copies fresh message ids.")]
KeepDeadLetterProperties = Annotated[
    bool,
    typer.Option("--keep-dead-letter-properties", help="Keep DeadLetterReason and description on the copies."),
]

R = TypeVar("R")


def _selecting(option: SelectionOption) -> inspect.Parameter:
    """The Typer parameter of a selection option: shown in the Selection panel of --help."""
    kind = list[str] | None if option.repeatable else str | None
    declared = typer.Option(option.flag, help=option.help, rich_help_panel=SEL, show_default=False)
    return inspect.Parameter(
        option.keyword, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=Annotated[kind, declared]
    )


@dataclass(frozen=True)
class SelectionOptions:
    """The selection options as given on the command line (`SELECTION_OPTIONS`, keyword → value);
    `compile()` checks and parses them."""

    given: Mapping[str, Any] = field(default_factory=dict)

    def compile(self) -> Selection:
        """The selection predicate; BadInput naming the option when a value is invalid."""
        return build_selection(**{k: v for k, v in self.given.items() if v is not None})


#: what a command's `selection` parameter defaults to (Typer passes the options given)
NO_SELECTION = SelectionOptions()


# The parameter a command declares to receive the selection options.
SELECTION_PARAMETER = "selection"


def _group_parameters(group: type) -> list[inspect.Parameter]:
    """One Typer parameter per field of the dataclass `group`, in field order (the order of --help)."""
    hints = get_type_hints(group, include_extras=True)
    return [
        inspect.Parameter(
            f.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=None if f.default is MISSING else f.default,
            annotation=hints[f.name],
        )
        for f in fields(group)
    ]


def replacing(
    parameter: str, declared: list[inspect.Parameter], build: Callable[[dict[str, Any]], Any]
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A decorator declaring `declared` in place of a command's `parameter`, passed as one `build(values)`."""

    def declare(command: Callable[..., R]) -> Callable[..., R]:
        names = [p.name for p in declared]

        @functools.wraps(command)
        def with_group(*args: Any, **kwargs: Any) -> R:
            chosen = build({name: kwargs.pop(name) for name in names if name in kwargs})
            return command(*args, **{parameter: chosen}, **kwargs)

        signature = inspect.signature(command)
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            params.extend(declared if param.name == parameter else [param])
        _set_signature(with_group, params, signature.return_annotation)
        return with_group

    return declare


def option_group(group: type, parameter: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A decorator declaring `group`'s fields in place of a command's `parameter`, passed as one `group`."""
    return replacing(parameter, _group_parameters(group), lambda values: group(**values))


def selection_options(command: Callable[..., R]) -> Callable[..., R]:
    """Declare every selection option (`SELECTION_OPTIONS`) in place of `command`'s `selection`
    parameter; pass them as one `SelectionOptions`."""
    declared = [_selecting(option) for option in SELECTION_OPTIONS]
    return replacing(SELECTION_PARAMETER, declared, SelectionOptions)(command)


def dlq_address(entity: str, sub_queue: SubQueue) -> Address:
    """The ENTITY argument's queue or subscription, on the sub-queue the command is bound to."""
    return Address(parse_entity(entity), sub_queue)


def tuning(ctx: "click.Context", s: "Settings", key: str, value: int | None, default: int | None = None) -> int:
    """--concurrency / --batch-size: the option when given, else the profile's value, else the default.

    The option's declared default is the one `--help` shows; a profile's value overrides it.
    """
    from click.core import ParameterSource

    if value is not None and ctx.get_parameter_source(key) not in (ParameterSource.DEFAULT, None):
        return value
    chosen = s.profile_default(key)
    if chosen:
        return int(chosen)
    if value is not None:
        return value
    assert default is not None
    return default


def for_sub_queue(
    command: Callable[..., R], sub_queue: SubQueue, *, options: Mapping[str, Any] | None = None
) -> Callable[..., R]:
    """`command` reading `sub_queue`: its `sub_queue` parameter bound, `options` replacing declarations."""
    replaced = options or {}

    @functools.wraps(command)
    def on_sub_queue(*args: Any, **kwargs: Any) -> R:
        return command(*args, sub_queue=sub_queue, **kwargs)

    signature = inspect.signature(command)
    params = [
        param.replace(annotation=replaced.get(param.name, param.annotation))
        for param in signature.parameters.values()
        if param.name != "sub_queue"
    ]
    _set_signature(on_sub_queue, params, signature.return_annotation)
    return on_sub_queue


def _set_signature(wrapper: Callable[..., Any], params: list[inspect.Parameter], returns: Any) -> None:
    """What Typer reads to build the command: the signature and the annotations behind it."""
    wrapper.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty}
    wrapper.__annotations__["return"] = returns
