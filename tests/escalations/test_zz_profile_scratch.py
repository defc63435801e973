import time
import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from pyinstrument import Profiler
from escalations.services import escalation_answer
from tests.conftest import REFUSED_CALLBACK
from tests.escalations.test_lean_answer import wide  # noqa

pytestmark = pytest.mark.django_db

@pytest.fixture
def desk_callback_url() -> str:
    return REFUSED_CALLBACK

def test_profile(wide, alice):
    escs = [wide.escalate("plan", run="wide")]
    p = Profiler(interval=0.0005)
    with TestCase.captureOnCommitCallbacks(execute=False), CaptureQueriesContext(connection) as q:
        p.start()
        t = time.perf_counter()
        escalation_answer(escalation=escs[0], reviewer=alice, text="x")
        dt = time.perf_counter() - t
        p.stop()
    print("TOTAL", dt * 1000)
    for x in q.captured_queries:
        print(x["time"], x["sql"][:100])
    print(p.output_text(unicode=False, color=False, show_all=False))
