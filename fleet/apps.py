"""The fleet's core: fleets, agents, keys, capabilities, members, sources, signing, the outbox."""

from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"

    def ready(self) -> None:
        # It imports models: only once they are loaded.
        from fleet import keyring

        keyring.connect()
