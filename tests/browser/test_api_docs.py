"""The API's browsable docs render under the strict CSP, from the app's own static files."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_docs_page_renders_its_operations_without_a_csp_violation(screens):
    from playwright.sync_api import expect

    screen = screens()
    page = screen.page
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto("/api/v1/docs")

    expect(page.get_by_role("heading", name="Bulkhead")).to_be_visible()
    expect(page.get_by_text("/api/v1/runs/{run}/frontier")).to_be_visible()
    screen.shot("api-docs")
    assert not screen.problems, screen.problems
    assert all(url.startswith(page.url.split("/api/")[0]) for url in requested), requested
