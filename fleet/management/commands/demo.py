"""demo: the demo fleet with agents, a reviewer and a manager, and its runs (idempotent)."""

import json
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from fleet import demo
from fleet.management.commands._output import emit


class Command(BaseCommand):
    help = "Load the demo fleet (idempotent) and print where to look and how to sign in."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument(
            "--quiet", action="store_true", help="print only where to look, as lines of text"
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="delete the demo fleet and all it recorded first, then load it afresh",
        )

    def handle(self, *args: Any, quiet: bool, reset: bool = False, **options: Any) -> None:
        if reset and demo.reset() and quiet:
            self.stdout.write("The demo fleet was deleted; loading it afresh.")
        summary = demo.load()
        login = settings.VAR_DIR / "demo-login.json"
        credentials = json.loads(login.read_text()) if login.exists() else {}
        user_model = get_user_model()
        for username in ("reviewer", "manager"):
            user = user_model.objects.get(username=username)
            password = credentials.get(username)
            if not password or not user.check_password(password):
                password = secrets.token_urlsafe(9)
                user.set_password(password)
                user.save(update_fields=["password"])
                credentials[username] = password
        login.write_text(json.dumps(credentials))
        text = settings.VAR_DIR / "demo-login.txt"
        text.write_text(
            f"Sign in as reviewer / {credentials['reviewer']} (or manager / {credentials['manager']})\n"
            f"The demo's emails (escalations announced, assigned, reminded) are {summary['emails']}\n"
        )
        summary["login"] = {name: credentials[name] for name in ("reviewer", "manager")}
        if quiet:  # `make run` prints the login beside the URL once the server is up
            self.stdout.write(f"The demo's emails are {summary['emails']}")
            self.stdout.write("Where to look:")
            for what, path in summary["look_at"].items():
                self.stdout.write(f"  {what}: {settings.SITE_URL.rstrip('/')}{path}")
        else:
            emit(self, summary)
