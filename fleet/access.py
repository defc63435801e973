"""Who may see or act on a fleet: a person's memberships and the role each gives."""

from typing import Any

from django.db.models import QuerySet

from fleet.models import Fleet, Membership

# Where member_fleet_ids leaves the person's roles ({fleet id: role}) on the user for the rest
# of the request, as Django's auth backend keeps permissions: the navigation reads them there.
FLEET_ROLES = "_fleet_roles"


def member_fleet_ids(user: Any) -> list[int]:
    """The fleets the person is a member of, in any role: nobody sees another fleet's work."""
    roles = dict(Membership.objects.filter(user_id=user.pk or 0).values_list("fleet_id", "role"))
    setattr(user, FLEET_ROLES, roles)
    return list(roles)


def member_fleets(user: Any) -> QuerySet[Fleet]:
    """member_fleet_ids as a query, for a filter to join rather than read first."""
    return Fleet.objects.filter(memberships__user_id=user.pk or 0).distinct()


def reviewed_fleet_ids(user: Any) -> set[int]:
    """The fleets whose escalations the person acts on (a manager of a fleet only reads them)."""
    roles = getattr(user, FLEET_ROLES, None)
    if roles is None:
        member_fleet_ids(user)
        roles = getattr(user, FLEET_ROLES)
    return {fleet for fleet, role in roles.items() if role == Membership.Role.REVIEWER}


def managed_fleet_ids(user: Any) -> list[int]:
    return list(
        Membership.objects.filter(user_id=user.pk or 0, role=Membership.Role.MANAGER).values_list(
            "fleet_id", flat=True
        )
    )


def reviews(user: Any, fleet_id: int) -> bool:
    """Only a fleet's reviewers act on its escalations and claims; its managers read them."""
    return Membership.objects.filter(
        user_id=user.pk or 0, fleet_id=fleet_id, role=Membership.Role.REVIEWER
    ).exists()


def manages(user: Any, fleet_id: int) -> bool:
    """Only a fleet's managers change its capabilities."""
    return Membership.objects.filter(
        user_id=user.pk or 0, fleet_id=fleet_id, role=Membership.Role.MANAGER
    ).exists()


def manages_a_fleet(user: Any) -> bool:
    """Whether the person manages any fleet: the reports are theirs."""
    # The page's view has usually read the person's memberships already (member_fleet_ids).
    roles = getattr(user, FLEET_ROLES, None)
    if roles is not None:
        return Membership.Role.MANAGER in roles.values()
    return Membership.objects.filter(user_id=user.pk or 0, role=Membership.Role.MANAGER).exists()
