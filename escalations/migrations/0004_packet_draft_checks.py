from django.db import migrations, models


def price_existing_packets(apps, schema_editor):
    """Packets from before: their evidence is re-checked once (by the reconciler), and a packet
    a reviewer returned carries the return's note."""
    packet_model = apps.get_model("escalations", "FailurePacket")
    for packet in packet_model.objects.only("pk", "content").iterator():
        content = packet.content if isinstance(packet.content, dict) else {}
        if content.get("evidence"):
            packet_model.objects.filter(pk=packet.pk).update(checks_pending=True)
    escalation_model = apps.get_model("escalations", "Escalation")
    for escalation in escalation_model.objects.filter(status="returned", packet__isnull=False):
        packet_model.objects.filter(pk=escalation.packet_id).update(
            returned_note=escalation.returned_reason, returned_at=escalation.acted_at
        )


class Migration(migrations.Migration):
    dependencies = [
        ("escalations", "0003_holds_for_open_escalations"),
        ("fleet", "0002_one_time_password"),
        ("runs", "0004_holds"),
    ]

    operations = [
        migrations.AddField(
            model_name="failurepacket",
            name="checks",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="The re-check of each evidence entry: {status, reason, payload}.",
            ),
        ),
        migrations.AddField(
            model_name="failurepacket",
            name="checks_pending",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="failurepacket",
            name="drafted",
            field=models.BooleanField(
                default=False, help_text="Drafted by Bulkhead from the attempts, not by the agent."
            ),
        ),
        migrations.AddField(
            model_name="failurepacket",
            name="from_draft",
            field=models.JSONField(
                blank=True, default=list, help_text="Fields the agent left to Bulkhead's draft."
            ),
        ),
        migrations.AddField(
            model_name="failurepacket",
            name="returned_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="failurepacket",
            name="returned_note",
            field=models.TextField(
                blank=True, help_text="The note of the reviewer who returned this packet."
            ),
        ),
        migrations.AlterField(
            model_name="failurepacket",
            name="smallest_unblocking_question",
            field=models.CharField(blank=True, max_length=500),
        ),
        migrations.AddIndex(
            model_name="failurepacket",
            index=models.Index(
                condition=models.Q(("checks_pending", True)),
                fields=["id"],
                name="packet_checks_pending",
            ),
        ),
        migrations.RunPython(price_existing_packets, migrations.RunPython.noop),
    ]
