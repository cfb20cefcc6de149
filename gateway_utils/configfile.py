"""Reading config text and phrasing what is wrong with it.

The one place that turns YAML into data (refusing a key given twice), replaces
`${NAME}` from the environment, and turns pydantic's errors into short
sentences at a path such as `agents[0].hooks[1].timeout_seconds: must be > 0`.
A leaf module: the config's *shape* is declared by the hook kinds
(`hooks.config`), the channel kinds (`channels_ext`) and the whole file
(`approvals.config_schema`), which all report through here.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

FILE = "<file>"  # the path of problems with the file as a whole
SLUG = r"^[a-z0-9][a-z0-9_-]*$"  # names of channels and agents


class ConfigProblem(NamedTuple):
    """One thing wrong with a config, at a path like `agents[0].hooks[1].timeout_seconds`."""

    path: str
    message: str


class ConfigError(Exception):
    """A config refused, with every problem found; `str()` gives one `path: message` per line."""

    def __init__(self, problems: Sequence[ConfigProblem]):
        self.problems = list(problems)
        super().__init__("\n".join(f"{problem.path}: {problem.message}" for problem in self.problems))


# --- YAML ---------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping (PyYAML would keep the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden key by key
            continue
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


class InvalidYaml(ConfigError):
    """Text that is not YAML: one problem, with where it broke (`line`, `column`, 1-based; None if unknown)."""

    def __init__(self, path: str, problem: str, line: int | None = None, column: int | None = None):
        self.problem, self.line, self.column = problem, line, column
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__([ConfigProblem(path, f"invalid YAML{where}: {problem}")])


def load_yaml(text: str, *, path: str = FILE) -> Any:
    """Parse YAML (JSON is YAML too) safely; a key given twice is an error. Raises InvalidYaml."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise InvalidYaml(path, str(exc.problem or exc.context), line, column) from None
    except yaml.YAMLError as exc:
        raise InvalidYaml(path, str(exc)) from None


# --- ${NAME} substitution -------------------------------------------------------------------

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_environment(
    value: Any, environ: Mapping[str, str], problems: list[ConfigProblem], path: str = ""
) -> Any:
    """Replace `${NAME}` (or `${NAME:-fallback}`) in every string of a parsed document.

    A variable that is not set is recorded as a problem at the path of the value using it.
    """
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, fallback = match.groups()
            found = environ.get(name)
            if fallback is not None and not found:  # `${NAME:-fallback}`: unset or empty
                return fallback
            if found is None:
                problems.append(ConfigProblem(path or FILE, f"environment variable {name} is not set"))
                return match.group(0)
            return found

        return _ENV_REFERENCE.sub(replace, value)
    if isinstance(value, Mapping):
        return {key: substitute_environment(item, environ, problems, join(path, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute_environment(item, environ, problems, join(path, index)) for index, item in enumerate(value)]
    return value


# --- validating pieces, problems by path ---------------------------------------------------------

_Model = TypeVar("_Model", bound=BaseModel)


def validate_model(model: type[_Model], raw: Any, path: str, problems: list[ConfigProblem]) -> _Model | None:
    """Validate `raw` with `model`; each error becomes a problem under `path`. None if invalid."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems.extend(ConfigProblem(join_loc(path, error["loc"]), message(error, model)) for error in exc.errors())
        return None


def validate_tagged(
    raw: Any, path: str, models: Mapping[str, type[_Model]], what: str, problems: list[ConfigProblem]
) -> _Model | None:
    """Validate a mapping with the model its `kind` names; unknown kinds are one problem, not a union's worth."""
    if not isinstance(raw, Mapping):
        problems.append(ConfigProblem(path, "must be a mapping with a `kind` key"))
        return None
    kind = raw.get("kind")
    known = f"known kinds: {', '.join(models)}"
    if kind is None:
        problems.append(ConfigProblem(f"{path}.kind", f"is required; {known}"))
    elif not isinstance(kind, str) or kind not in models:
        problems.append(ConfigProblem(f"{path}.kind", f"unknown {what} kind {kind!r}; {known}"))
    else:
        return validate_model(models[kind], raw, path, problems)
    return None


def list_at(mapping: Mapping[Any, Any], key: str, path: str, problems: list[ConfigProblem]) -> list[Any]:
    """`mapping[key]` if it is a list (absent: empty); otherwise a problem and an empty list."""
    value = mapping.get(key, [])
    if isinstance(value, list):
        return value
    problems.append(ConfigProblem(path, "must be a list"))
    return []


def raw_names(raw_items: Sequence[Any], path: str) -> list[tuple[str, str]]:
    """(path, name) of each item that has a string name, valid or not."""
    return [
        (f"{path}[{index}]", raw["name"])
        for index, raw in enumerate(raw_items)
        if isinstance(raw, Mapping) and isinstance(raw.get("name"), str)
    ]


def check_unique_names(named: Iterable[tuple[str, str]], problems: list[ConfigProblem]) -> None:
    """Report each (path, name) whose name an earlier one has, at `<path>.name`."""
    first_path_of: dict[str, str] = {}
    for path, name in named:
        if name in first_path_of:
            problems.append(ConfigProblem(f"{path}.name", f"{name!r} is already used by {first_path_of[name]}"))
        first_path_of.setdefault(name, path)


def join_loc(path: str, loc: Sequence[int | str]) -> str:
    for part in loc:
        path = join(path, part)
    return path or FILE


def join(path: str, part: Any) -> str:
    """`agents` + 0 -> `agents[0]`; `agents[0]` + `name` -> `agents[0].name`."""
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else str(part)


# --- pydantic errors as sentences ------------------------------------------------------------------

_FIXED_MESSAGES = {
    "missing": "is required",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}
_TEMPLATES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "string_too_long": "must be at most {max_length} characters",
    "too_long": "must have at most {max_length} items",
    "literal_error": "must be {expected}",
}


def message(error: ErrorDetails, model: type[BaseModel]) -> str:
    """Pydantic's error as a short sentence about the value at its path."""
    kind, ctx = error["type"], error.get("ctx", {})
    if kind in _FIXED_MESSAGES:
        return _FIXED_MESSAGES[kind]
    if kind in _TEMPLATES:
        return _TEMPLATES[kind].format(**{key: _plain_number(value) for key, value in ctx.items()})
    if kind == "value_error":
        return str(ctx["error"])
    if kind in ("string_too_short", "too_short"):
        unit = "characters" if kind == "string_too_short" else "items"
        return "must not be empty" if ctx["min_length"] == 1 else f"must have at least {ctx['min_length']} {unit}"
    if kind == "string_pattern_mismatch" and ctx["pattern"] == SLUG:
        return "must be a slug: lowercase letters, digits, '-' and '_', starting with a letter or digit"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx['pattern']}"
    if kind == "extra_forbidden":
        return _unknown_key_message(model, error["loc"])
    return error["msg"][:1].lower() + error["msg"][1:]


def _plain_number(value: Any) -> Any:
    """`ge=0` on a float field comes back as 0.0; say 0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _unknown_key_message(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    owner = _model_at(model, loc[:-1])
    if owner is None:
        return "unknown key"
    allowed = list(owner.model_fields)
    close = [repr(key) for key in difflib.get_close_matches(str(loc[-1]), allowed, n=2)]
    return (
        f"unknown key; did you mean {' or '.join(close)}?" if close else f"unknown key; allowed: {', '.join(allowed)}"
    )


def _model_at(model: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model of the mapping at `loc` inside `model`, if it is a model."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) and get_origin(current) is list:
            current = get_args(current)[0]
        elif isinstance(part, str) and _is_model(current) and part in current.model_fields:
            current = _without_none(current.model_fields[part].annotation)
        else:
            return None
    return current if _is_model(current) else None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _without_none(annotation: Any) -> Any:
    """`X | None` -> X; anything else unchanged."""
    if get_origin(annotation) in (Union, types.UnionType):
        others = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(others) == 1:
            return others[0]
    return annotation
