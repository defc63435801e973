"""On PostgreSQL a statement the connection sends again and again is prepared: parsed once,
its values sent apart from its text, and each call still planned for its own values (a generic
plan made while a table was small would read it whole once grown). `DATABASE_PREPARED_STATEMENTS=0`
turns it off, for a pooler that cannot keep prepared statements."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_a_statement_sent_again_and_again_is_prepared_once_and_planned_for_each_call():
    marker = "prepared-statement-probe"
    with connection.cursor() as cursor:
        for n in range(16):
            cursor.execute(
                f"SELECT count(*) FROM fleet_agent WHERE name = %s /* {marker} */", [f"a{n}"]
            )
            assert cursor.fetchone() == (0,)
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        prepared = [row for row in cursor.fetchall() if marker in row[0]]
    assert len(prepared) == 1, prepared
    text, generic, custom = prepared[0]
    assert "$1" in text  # the value travelled apart from the text
    assert custom >= 10  # the calls after the fifth ran the prepared statement
    assert generic == 0  # each planned for its value


def settings_options(**env: str) -> dict[str, object]:
    script = (
        "import json, django\nfrom django.conf import settings\ndjango.setup()\n"
        "print(json.dumps(settings.DATABASES['default']['OPTIONS'], default=str))"
    )
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "fleet.settings", **env}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environment, capture_output=True,
        text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_prepared_statements_are_on_by_default_and_off_when_the_environment_says_so():
    url = "postgresql://postgres@127.0.0.1:5432/bulkhead"
    on = settings_options(DATABASE_URL=url)
    assert on["server_side_binding"] is True
    assert on["prepare_threshold"] == 5
    assert on["options"] == "-c jit=off -c plan_cache_mode=force_custom_plan"
    off = settings_options(DATABASE_URL=url, DATABASE_PREPARED_STATEMENTS="0")
    assert "server_side_binding" not in off
    assert "prepare_threshold" not in off
    assert off["options"] == "-c jit=off"
