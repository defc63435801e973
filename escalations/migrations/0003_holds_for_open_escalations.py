"""Every escalation still open holds its task, as the desk now places a hold when one opens."""

from django.db import migrations


def place_holds(apps, schema_editor):  # type: ignore[no-untyped-def]
    Escalation = apps.get_model("escalations", "Escalation")
    Hold = apps.get_model("runs", "Hold")
    Hold.objects.bulk_create(
        [
            Hold(task_id=task_id, code=f"escalation:{pk}", placed_at=opened_at)
            for pk, task_id, opened_at in Escalation.objects.filter(
                status__in=("open", "claimed")
            ).values_list("pk", "task_id", "opened_at")
        ],
        ignore_conflicts=True,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("escalations", "0002_escalation_waiting_order"),
        ("runs", "0004_holds"),
    ]

    operations = [migrations.RunPython(place_holds, migrations.RunPython.noop)]
