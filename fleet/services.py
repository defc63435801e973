"""Writes of the fleet: fleets, agents and their keys, members, verification sources."""

import re
import secrets
import shlex
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from django.contrib.auth import get_user_model
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from fleet.datasources import too_privileged
from fleet.models import (
    Agent,
    ApiToken,
    Fleet,
    Membership,
    OneTimePassword,
    SigningKey,
    VerificationSource,
)

VALUE_MAX_LENGTH = 1000  # VerificationSource.value
AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")
HOST_NAME = re.compile(
    r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)(?::[0-9]{1,5})?$"
)


def refuse_unless_fits(value: str, what: str, max_length: int) -> None:
    """The commands' values must fit their columns: a clear refusal, not a database error."""
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > max_length:
        raise ValueError(f"{what} is {len(value)} characters; at most {max_length}")


@transaction.atomic
def fleet_create(*, name: str, callback_url: str | None = None) -> Fleet:
    """The fleet, created if new. A callback URL given (the same or a new one) is where its
    notifications go from now on, enabled again if a 410 Gone disabled it; "" removes it."""
    refuse_unless_fits(name, "the fleet's name", 100)
    if callback_url is not None and len(callback_url) > 1000:
        raise ValueError(f"the callback URL is {len(callback_url)} characters; at most 1000")
    fleet, _ = Fleet.objects.get_or_create(name=name, defaults={"callback_url": callback_url or ""})
    if callback_url is not None and (
        fleet.callback_url != callback_url or fleet.callback_disabled_at is not None
    ):
        fleet.callback_url = callback_url
        fleet.callback_disabled_at = None
        fleet.callback_disabled_reason = ""
        fleet.save(
            update_fields=["callback_url", "callback_disabled_at", "callback_disabled_reason"]
        )
    return fleet


@transaction.atomic
def agent_create(
    *, fleet: Fleet, name: str, role: str = "", orchestrator: bool = False, tool: bool = False
) -> tuple[Agent, str, str]:
    """A new agent with one signing key and one API token; returns both secrets (shown once)."""
    refuse_unless_fits(name, "the agent's name", 100)
    if not AGENT_NAME.match(name):
        raise ValueError(
            f"the agent's name {name!r} may hold letters, digits and . _ @ + - "
            "(starting with a letter or digit): events name it"
        )
    if len(role) > 100:
        raise ValueError(f"the role is {len(role)} characters; at most 100")
    if Agent.objects.filter(fleet=fleet, name=name).exists():
        raise ValueError(f"agent {name!r} already exists in fleet {fleet.name!r}")
    agent = Agent.objects.create(
        fleet=fleet, name=name, role=role, is_orchestrator=orchestrator, is_tool=tool
    )
    key = SigningKey.objects.create(agent=agent)
    _, token = ApiToken.issue(agent)
    return agent, key.secret, token


@transaction.atomic
def signing_key_add(*, agent: Agent) -> SigningKey:
    """Another active signing key for the agent: both verify until the old one is revoked."""
    return SigningKey.objects.create(agent=agent)


@transaction.atomic
def signing_key_revoke(*, agent: Agent, key_id: int, at: datetime) -> SigningKey:
    """Deactivate one of the agent's keys; events signed with it get a 401 from now on."""
    key = SigningKey.objects.select_for_update().filter(agent=agent, pk=key_id).first()
    if key is None:
        raise ValueError(f"agent {agent.name!r} has no signing key {key_id}")
    if not key.active:
        raise ValueError(f"signing key {key_id} of agent {agent.name!r} is already revoked")
    key.active = False
    key.revoked_at = at
    key.save(update_fields=["active", "revoked_at"])
    return key


@transaction.atomic
def member_add(
    *, username: str, fleet: Fleet, role: str, one_time: bool = False, new_password: bool = False
) -> tuple[Any, str | None]:
    """Make a user a member; a new user (or, with `new_password`, an existing one) gets a
    password, returned once. With `one_time` it opens one session only, which must set the
    user's own password first."""
    user_model = get_user_model()
    refuse_unless_fits(username, "the username", 150)
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError as exc:
        raise ValueError(f"the username {username!r}: {exc.messages[0]}") from exc
    user = user_model.objects.filter(username=username).first()
    password = None
    if user is None:
        password = secrets.token_urlsafe(12)
        user = user_model.objects.create_user(username=username, password=password)
    elif new_password:
        password = secrets.token_urlsafe(12)
        user.set_password(password)
        user.save(update_fields=["password"])
    if password is not None and one_time:
        OneTimePassword.objects.update_or_create(
            user=user, defaults={"issued_at": timezone.now(), "used_at": None}
        )
    Membership.objects.update_or_create(user=user, fleet=fleet, defaults={"role": role})
    return user, password


@transaction.atomic
def source_add(*, fleet: Fleet, kind: str, name: str, value: str) -> VerificationSource:
    """Register a verification source; a SQLite data source or a workspace must exist now."""
    if kind not in VerificationSource.Kind.values:
        raise ValueError(f"kind must be one of {', '.join(VerificationSource.Kind.values)}")
    refuse_unless_fits(name, "the source's name", 100)
    refuse_unless_fits(value.strip(), f"the {kind}'s value", VALUE_MAX_LENGTH)
    if kind == VerificationSource.Kind.HOST and not HOST_NAME.match(value):
        raise ValueError(
            f"{value!r} is not a host name: give a name or address, optionally with :port "
            "(api.example.com, 127.0.0.1:8080), no scheme or path"
        )
    if kind == VerificationSource.Kind.COMMAND:
        try:
            shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"the command {value!r} cannot be split into words: {exc}") from exc
    if kind == VerificationSource.Kind.DATASOURCE:
        value = datasource_value(value)
    elif kind == VerificationSource.Kind.WORKSPACE:
        value = workspace_value(value)
    refuse_unless_fits(value, f"the {kind}'s value", VALUE_MAX_LENGTH)
    source, _ = VerificationSource.objects.update_or_create(
        fleet=fleet, kind=kind, name=name, defaults={"value": value}
    )
    return source


POSTGRESQL_SCHEMES = ("postgresql://", "postgres://")
SQLITE_URL = "sqlite:///"
SQLITE_HEADER = b"SQLite format 3\x00"


def datasource_value(value: str) -> str:
    """A PostgreSQL DSN as given (reached only when a verifier runs), or a SQLite database's
    absolute path, from a path or a `sqlite:///` URL (the verifier opens a plain path)."""
    if value.startswith(POSTGRESQL_SCHEMES):
        refuse_a_privileged_role(value)
        return value
    if value.startswith(SQLITE_URL):
        path_text = urllib.parse.unquote(value.removeprefix(SQLITE_URL).split("?", 1)[0])
    elif "://" in value or value.startswith("sqlite:"):
        raise ValueError(
            f"{value!r} is not a data source: give a PostgreSQL DSN (postgresql://...), "
            "a sqlite:/// URL or the path of a SQLite database file"
        )
    else:
        path_text = value
    if not path_text:
        raise ValueError(f"{value!r} names no SQLite database file")
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"no SQLite database file at {path}")
    with path.open("rb") as database:
        header = database.read(len(SQLITE_HEADER))
    if header and header != SQLITE_HEADER:
        raise ValueError(f"{path} is not a SQLite database file")
    return str(path)


def refuse_a_privileged_role(dsn: str) -> None:
    """A verifier runs agents' queries: as a superuser they could read the server's files or stop
    other sessions. A DSN reachable now is refused unless its role only reads; one that is not
    reachable is checked by the verifier at each connection."""
    try:
        connection = psycopg.connect(dsn, connect_timeout=3)
    except psycopg.Error:
        return
    with connection, connection.cursor() as cursor:
        why = too_privileged(cursor)
    if why:
        raise ValueError(f"this data source's {why}")


def workspace_value(value: str) -> str:
    """A workspace's absolute path: an existing directory (the file verifiers read under it)."""
    if not value:
        raise ValueError("a workspace is the path of a directory")
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise ValueError(f"no directory at {path}")
    return str(path)
