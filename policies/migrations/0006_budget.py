from django.db import migrations, models

HELP = (
    'Spend budget, e.g. {"usd": 100, "period": "month"} (period: day, month or total; UTC). Requests are admitted '
    "while their worst-case cost fits what is left (docs/limits.md#budgets). Models without prices cost 0. Blank: none."
)


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0005_org_log_bodies"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="budget",
            field=models.JSONField(blank=True, help_text=HELP, null=True),
        ),
        migrations.AddField(
            model_name="org",
            name="budget",
            field=models.JSONField(blank=True, help_text=HELP, null=True),
        ),
    ]
