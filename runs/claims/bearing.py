"""Whether evidence bears on a claim: it mentions what the claim is about, and agrees with the verdict.

A verifier can tell that evidence is real (reality matches its hash), not what it is evidence of:
`SELECT 1` on the orders database is real, and says nothing about `customers.customer_tier`. So a
claim names its subjects (`about` and the code spans of its statement), and evidence settles it
only when it mentions them and its payload points the way of the verdict. The rule is pure: plain
values in, `None` (it bears) or the reason it does not, out. docs/evidence.md states it for agents.
"""

import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import sqlparse
from sqlparse import tokens as sql_tokens
from sqlparse.sql import Identifier

_CITES_AN_AGENT: Final = re.compile(r"\s*agent\s*:")


def cites_an_agent(source: str) -> bool:
    """Evidence pointing at another agent's output (`agent:<name>`): never checked, never a
    verdict's basis. Read as a person reads it: "Agent :x", a full-width colon or letter, or a
    zero-width space or soft hyphen anywhere in "agent:" cite an agent as plainly."""
    shown = "".join(
        ch for ch in unicodedata.normalize("NFKC", source) if unicodedata.category(ch) != "Cf"
    )
    return _CITES_AN_AGENT.match(shown.casefold()) is not None


MAX_SUBJECTS: Final = 20  # `about` entries on one claim
MAX_SUBJECT_LENGTH: Final = 200

NO_SUBJECT: Final = (
    "the claim names nothing evidence could bear on: give it `about` (a table.column, a file "
    "path, a URL, a test id, a config key) or write its subjects in backticks in the statement"
)

# Letters, digits, `_` and `-` make one word: `customer_tier` is not in `customer_tier_id`, and
# `pricing-config.yaml` is not in `old-pricing-config.yaml`.
_WORD: Final = r"[\w-]"
_CODE_SPAN: Final = re.compile(r"`([^`\n]+)`")
_NAMES_A_THING: Final = re.compile(r"[^\s]*[A-Za-z][^\s]*")
_IDENTIFIER: Final = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED: Final = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER}){{1,2}}")
# `config.yaml` is a file, not the column `yaml` of a table `config`.
_FILE_EXTENSIONS: Final = frozenset(
    {
        *("c", "cfg", "conf", "cpp", "css", "csv", "env", "go", "h", "html", "ini", "java"),
        *("js", "json", "jsx", "kt", "lock", "log", "md", "php", "py", "rb", "rs", "rst"),
        *("sh", "sql", "toml", "ts", "tsx", "txt", "xml", "yaml", "yml"),
    }
)
_SAYS_EXISTS: Final = re.compile(r"\b(?:columns?|exists?|existing)\b", re.IGNORECASE)
# A claim that something is not there, or that tests fail: the shapes below show the opposite only.
_NEGATIVE: Final = re.compile(
    r"\b(?:no|not|never|none|without|lacks?|lacking|missing|absent)\b|n't\b", re.IGNORECASE
)
_FAILING: Final = re.compile(r"\b(?:fail|fails|failing|failed|failure|broken)\b", re.IGNORECASE)
# Where a database lists a table's columns: rows of these name every column there is.
_READS_SCHEMA: Final = re.compile(
    r"\b(?:information_schema|pragma_table_x?info|table_x?info|pg_attribute|pg_catalog)\b",
    re.IGNORECASE,
)
_STATED_STATUS: Final = re.compile(
    r"\b(?:status(?:\s+code)?|returns|answers|responds(?:\s+with)?|HTTP)\s+([1-5][0-9]{2})\b",
    re.IGNORECASE,
)


def subjects_of(about: Iterable[str], statement: str) -> tuple[str, ...]:
    """What the claim is about, once each: its `about` list, then its statement's code spans.

    `about` adds subjects; it cannot take away what the statement names: `about: ["customers"]`
    on "`customers.customer_tier` exists" still needs evidence that mentions `customer_tier`.
    With `about` given, only the code spans that name a thing (no space, a letter: a
    `table.column`, a file, a key; not `GET /health` or `200`) and that no `about` entry
    already names are added."""
    given = [s.strip() for s in about]
    spans = [s.strip() for s in _CODE_SPAN.findall(statement)]
    if given:
        spans = [
            span
            for span in spans
            if _NAMES_A_THING.fullmatch(span) and not any(mentions(g, span) for g in given)
        ]
    seen: set[str] = set()
    found = []
    for subject in given + spans:
        if subject and subject.lower() not in seen:
            seen.add(subject.lower())
            found.append(subject)
    return tuple(found)


def mentions(text: str, subject: str) -> bool:
    """`subject` appears in `text` as a word (case-insensitive), or, for `table.column`, each part.

    A dotted name of two or three identifiers that is not a file name (`customers.customer_tier`,
    `public.customers.customer_tier`, `settings.DEBUG`) is mentioned also when each of its parts
    is, as a person reads a query on `customers` that lists `customer_tier`.
    """
    if _mentions_whole(text, subject):
        return True
    parts = dotted_parts(subject)
    return bool(parts) and all(_mentions_whole(text, part) for part in parts)


def dotted_parts(subject: str) -> tuple[str, ...]:
    if not _DOTTED.fullmatch(subject):
        return ()
    parts = tuple(subject.split("."))
    return () if parts[-1].lower() in _FILE_EXTENSIONS else parts


def _mentions_whole(text: str, subject: str) -> bool:
    if not subject:
        return False
    before = rf"(?<!{_WORD})" if re.match(_WORD, subject[0]) else ""
    after = rf"(?!{_WORD})" if re.match(_WORD, subject[-1]) else ""
    return re.search(before + re.escape(subject) + after, text, re.IGNORECASE) is not None


def columns_of(subjects: Sequence[str], statement: str) -> tuple[str, ...]:
    """The column subjects: each `table.column`'s column, and each subject the statement calls a
    column (`` `customer_tier` column ``, ``column `customer_tier` ``)."""
    plain = statement.replace("`", "")
    found = []
    for subject in subjects:
        parts = dotted_parts(subject)
        if parts:
            found.append(parts[-1])
            continue
        name = rf"(?<!{_WORD}){re.escape(subject)}(?!{_WORD})"
        next_to_column = rf"{name}\s+columns?\b|\bcolumns?\s+(?:named\s+|called\s+)?{name}"
        if re.search(next_to_column, plain, re.IGNORECASE):
            found.append(subject)
    return tuple(found)


def stated_status(statement: str) -> int | None:
    """The HTTP status the statement states (`returns 200`, `status 404`), if it states one."""
    found = _STATED_STATUS.search(statement.replace("`", ""))
    return int(found[1]) if found else None


def bearing(
    *,
    subjects: Sequence[str],
    statement: str,
    kind: str,
    source: str,
    payload: Mapping[str, Any] | None,
    verdict: str,
) -> str | None:
    """None if the evidence bears on the claim for `verdict` ("verified" or "refuted"); else why not.

    `payload` is what reality gave (None when it gave nothing, such as a query that fails): the
    evidence is judged on its source and on reality, not on what the agent says reality gave.
    """
    if not subjects:
        return NO_SUBJECT
    said = _sql_said(source) if kind == "query_result" else source  # a query read once
    text = "\n".join(_mentioning(kind, said, payload))
    if verdict == "verified":
        missing = [s for s in subjects if not mentions(text, s)]
        if missing:
            return (
                f"the evidence does not mention {', '.join(missing)}: it bears on another question"
            )
    elif not any(mentions(text, s) or _mentions_table(text, s) for s in subjects):
        return (
            f"the evidence mentions none of the claim's subjects ({', '.join(subjects)}): "
            "it bears on another question"
        )
    if payload is None:
        return None  # reality gave nothing (the query fails, the file is not there): that is all
    if kind == "query_result":
        return _query_agrees(subjects, statement, source, said, payload, verdict)
    if kind == "test_run":
        return _test_run_agrees(statement, payload, verdict)
    if kind == "http_exchange":
        return _http_agrees(statement, payload, verdict)
    return None


def _mentions_table(text: str, subject: str) -> bool:
    """For a refutation: the table of a `table.column` (a query on `customers` that lacks it)."""
    parts = dotted_parts(subject)
    return bool(parts) and mentions(text, ".".join(parts[:-1]))


def _query_agrees(
    subjects: Sequence[str],
    statement: str,
    source: str,
    said: str,
    payload: Mapping[str, Any],
    verdict: str,
) -> str | None:
    """An existence claim about a column is shown by rows that name it; refuted by a query of the
    schema whose rows do not (rows without it from any other query show nothing missing)."""
    columns = columns_of(subjects, statement)
    if not columns or not _SAYS_EXISTS.search(_prose(statement)):
        return None
    negative = _NEGATIVE.search(_prose(statement))
    if negative:
        return (
            f"the claim reads as a negative ({negative[0]!r}): a query's rows settle only that a "
            "column is there; a reviewer may settle this one"
        )
    rows = "\n".join(_values(payload.get("rows")))
    if verdict == "refuted" and _SQL_EXCLUDES.search(said):
        left_out = [column for column in columns if _mentions_whole(said, column)]
        if left_out:
            return (
                f"the query filters on {', '.join(left_out)} itself: rows it leaves out do not "
                "show the column missing"
            )
    for column in columns:
        named = _mentions_whole(rows, column)
        if verdict == "verified" and not named:
            return f"the query's rows do not name the column {column}, so they do not show it"
        if verdict == "refuted" and named:
            return f"the query's rows name the column {column}, so they do not show it missing"
    if not _READS_SCHEMA.search(source):
        shows = (
            "rows without the column do not show it missing"
            if verdict == "refuted"
            else "rows that name the column do not show it is there (they may be its own words)"
        )
        return (
            "the query does not read the schema (information_schema.columns, pragma_table_info): "
            + shows
        )
    return None


_SQL_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
# A filter that leaves rows out: a schema query with it cannot show a column missing.
_SQL_EXCLUDES = re.compile(r"!=|<>|\bNOT\s+(?:IN|LIKE|GLOB)\b|\bEXCEPT\b", re.I)


def _mentioning(kind: str, said: str, payload: Mapping[str, Any] | None) -> list[str]:
    """The evidence's text that may mention a subject (`said`: its source, a query's as
    `_sql_said` reads it). A query's: what it says about the data and its rows, not its result's
    column names (an alias names them). An HTTP exchange's: its URLs without the fragment, which
    is never sent to the server."""
    if kind == "query_result":
        rows = payload.get("rows") if isinstance(payload, Mapping) else None
        return [said, *_values(rows)]
    if kind == "http_exchange":
        request = payload.get("request") if isinstance(payload, Mapping) else None
        url = request.get("url") if isinstance(request, Mapping) else None
        rest = {k: v for k, v in (payload or {}).items() if k != "request"}
        return [_unfragmented(said), _unfragmented(str(url or "")), *_values(rest)]
    return [said, *_values(payload)]


def _unfragmented(url: str) -> str:
    return url.split("#", 1)[0]


def _sql_said(source: str) -> str:
    """What a query says about the data: not its comments, not the names it gives its columns
    or tables (`SELECT 1 AS customer_tier`, `SELECT 1 customer_tier`, `FROM t customer_tier`
    mention nothing), and, unless it reads the schema (where a literal names a table:
    `WHERE table_name = 'customers'`), not its string literals (`WHERE 'customer_tier' <> ''`)."""
    uncommented = _SQL_COMMENT.sub(" ", source)
    literals_name = bool(_READS_SCHEMA.search(uncommented))
    said: list[str] = []

    def walk(token: Any) -> None:
        if token.ttype in sql_tokens.Comment:
            return
        if token.ttype in sql_tokens.Literal.String and not literals_name:
            said.append(" ")
            return
        if isinstance(token, Identifier) and token.has_alias():
            parts = [t for t in token.tokens if not t.is_whitespace]
            alias = parts[-1]
            for part in token.tokens:
                if part is alias:
                    break
                if part.ttype in sql_tokens.Keyword and part.normalized == "AS":
                    continue
                walk(part)
            said.append(" ")
            return
        if token.is_group:
            for part in token.tokens:
                walk(part)
            return
        said.append(str(token))

    for statement in sqlparse.parse(uncommented):
        walk(statement)
    return "".join(said)


def _test_run_agrees(statement: str, payload: Mapping[str, Any], verdict: str) -> str | None:
    failing = _FAILING.search(_prose(statement))
    if failing:
        return (
            f"the claim speaks of failing ({failing[0]!r}): an exit code settles only that tests "
            "pass; a reviewer may settle this one"
        )
    code = payload.get("exit_code")
    passed = code == 0 and not isinstance(code, bool)
    if verdict == "verified" and not passed:
        return f"the command exits with {code}, not 0: the tests do not pass"
    if verdict == "refuted" and passed:
        return "the command exits with 0: the tests pass, so it does not refute the claim"
    return None


def _http_agrees(statement: str, payload: Mapping[str, Any], verdict: str) -> str | None:
    stated = stated_status(statement)
    response = payload.get("response")
    status = response.get("status") if isinstance(response, Mapping) else None
    if stated is None:
        return None
    if verdict == "verified" and status != stated:
        return f"the response status is {status}, not the {stated} the claim states"
    if verdict == "refuted" and status == stated:
        return f"the response status is {stated}, as the claim states, so it does not refute it"
    return None


def _prose(statement: str) -> str:
    """The statement without its code spans: `test_fail.py` or `no_tier` are names, not words."""
    return _CODE_SPAN.sub(" ", statement)


def _values(value: object) -> Iterator[str]:
    """Every string and number in a payload (not its keys: `"status"` is in every HTTP payload)."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _values(item)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)
