"""Pages of the human desk."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from escalations.models import Escalation
from fleet.models import Membership


@login_required
def home(request: HttpRequest) -> HttpResponse:
    fleets = Membership.objects.filter(user_id=request.user.pk or 0).values_list(
        "fleet_id", flat=True
    )
    waiting = Escalation.objects.filter(fleet_id__in=fleets, status__in=Escalation.OPEN_STATES)
    return render(request, "escalations/home.html", {"waiting": waiting.count()})
