"""`claim.posted` with `about`: what the claim is about, bounded, stored, and shown in the API."""

import pytest

from runs.claims.bearing import MAX_SUBJECT_LENGTH, MAX_SUBJECTS
from runs.models import Claim
from tests.fixtures.seed import ATTEMPT, PhoenixDX, seed_tasks

RUN = "tier-discounts"


def posts(seed: PhoenixDX, about: object, statement: str = "the discount reads the tier") -> object:
    seed.planner.post("run.started", {"run": RUN, "tasks": seed_tasks()})
    seed.planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    claim = {"key": "plan.customer-tier", "statement": statement, "about": about}
    return seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})


def test_about_is_stored_and_the_api_shows_the_claims_subjects(client, seed):
    posted = posts(seed, ["customers.customer_tier", "config/pricing.yaml"])

    assert posted.status_code == 202, posted.json()
    assert Claim.objects.get().about == ["customers.customer_tier", "config/pricing.yaml"]
    [row] = seed.get(client, f"/api/v1/runs/{RUN}").json()["claims"]
    assert row["subjects"] == ["customers.customer_tier", "config/pricing.yaml"]


def test_without_about_the_subjects_are_the_statements_code_spans(client, seed):
    posts(seed, [], statement="Use `customer_tier` on `customers`")

    [row] = seed.get(client, f"/api/v1/runs/{RUN}").json()["claims"]
    assert row["subjects"] == ["customer_tier", "customers"]


@pytest.mark.parametrize(
    ("about", "loc"),
    [
        ([f"t.c{i}" for i in range(MAX_SUBJECTS + 1)], "data.claim.about"),
        (["x" * (MAX_SUBJECT_LENGTH + 1)], "data.claim.about.0"),
        (["customers", ""], "data.claim.about.1"),
        (["   "], "data.claim.about.0"),
        (["customers\ncustomer_tier"], "data.claim.about.0"),
        ([42], "data.claim.about.0"),
        ("customers.customer_tier", "data.claim.about"),
    ],
)
def test_an_about_out_of_bounds_is_refused_naming_the_field(client, seed, about, loc):
    refused = posts(seed, about)

    assert refused.status_code == 422
    assert loc in [e["loc"] for e in refused.json()["errors"]], refused.json()
    assert not Claim.objects.exists()
