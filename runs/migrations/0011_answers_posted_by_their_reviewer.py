"""A reviewer's answer is stored as a verified claim on the task it answered; it now records the
reviewer as who posted it (`posted_by`). Answers stored before were left blank: they are the
claims whose `human_answer` evidence says so, and their reviewer is who checked them."""

from django.db import migrations
from django.db.models import Exists, F, OuterRef

ANSWER = "a reviewer's answer is itself a verified claim"


def answers_posted_by_their_reviewer(apps, schema_editor):
    Claim = apps.get_model("runs", "Claim")
    Evidence = apps.get_model("runs", "Evidence")
    answer = Evidence.objects.filter(
        claim=OuterRef("pk"), kind="human_answer", verdict_reason=ANSWER
    )
    Claim.objects.filter(posted_by="", checked_by__startswith="reviewer:").filter(
        Exists(answer)
    ).update(posted_by=F("checked_by"))


class Migration(migrations.Migration):
    dependencies = [("runs", "0010_indexes_a_look_up_reads_by")]

    operations = [
        migrations.RunPython(answers_posted_by_their_reviewer, migrations.RunPython.noop),
    ]
