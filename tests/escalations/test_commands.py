"""The desk's management commands refuse bad input with a message naming the option."""

import io

import pytest
from django.core.management import CommandError, call_command

from escalations.models import RoutingRule
from escalations.services import routing
from fleet.errors import Refusal
from tests.escalations.desk import member
from tests.escalations.routed import pool

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("given", ["-5", "99999999999999", "first"])
def test_route_add_refuses_a_position_out_of_range_naming_it(fleet, given):
    member("alice", fleet)
    pool(fleet, "planners", "alice")

    with pytest.raises(CommandError, match="argument --position: .*(from 0 to 2147483647|whole)"):
        call_command("route_add", "acme", "planners", "--position", given, stdout=io.StringIO())

    assert not RoutingRule.objects.exists()


def test_route_add_takes_the_largest_position_the_column_holds(fleet):
    member("alice", fleet)
    pool(fleet, "planners", "alice")

    call_command("route_add", "acme", "planners", "--position", "2147483647", stdout=io.StringIO())

    assert RoutingRule.objects.get().position == 2147483647
    with pytest.raises(Refusal, match="position: -1 is out of range"):
        routing.route_add(fleet=fleet, pool="planners", position=-1)
