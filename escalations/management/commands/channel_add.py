"""channel_add (--fleet FLEET | --user USERNAME) email|chat TARGET [--remove]."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from escalations.models import Channel
from escalations.services import messages
from fleet.errors import Refusal
from fleet.management.commands._output import emit, fleet_named


class Command(BaseCommand):
    help = (
        "Where a fleet's escalations are announced (--fleet) or a reviewer is reached (--user): "
        "an email address, or a chat URL Apprise knows (slack://…, msteams://…, discord://…, "
        "json://host/path for any incoming webhook)."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--fleet")
        who.add_argument("--user")
        parser.add_argument("kind", choices=Channel.Kind.values)
        parser.add_argument("target")
        parser.add_argument("--remove", action="store_true", help="remove the channel instead")

    def handle(self, *args, fleet, user, kind, target, remove, **options):  # type: ignore[no-untyped-def]
        owner = {"fleet": fleet_named(fleet)} if fleet else {"user": user_named(user)}
        if remove:
            deleted, _ = Channel.objects.filter(kind=kind, target=target.strip(), **owner).delete()
            emit(self, {"removed": deleted})
            return
        try:
            channel = messages.channel_add(kind=kind, target=target, **owner)
        except Refusal as refused:
            raise CommandError(refused.message) from None
        emit(
            self,
            {
                "id": channel.pk,
                "fleet": fleet,
                "user": user,
                "kind": channel.kind,
                "target": messages.shown_target(channel.kind, channel.target),
            },
        )


def user_named(username: str):  # type: ignore[no-untyped-def]
    found = get_user_model().objects.filter(username=username).first()
    if found is None:
        raise CommandError(f"no user named {username!r}; add them with member_add")
    return found
