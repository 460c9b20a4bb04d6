"""The hourly aggregates' latency histogram starts at 0.25 ms instead of 16 ms (routing.runtime.usage.rollup).

Twelve more buckets below 16 ms: bucket i of the old histogram is bucket i + 12 of the new
one (same bounds). The old first bucket (everything under 16 ms) cannot be split: its counts
go to the new bucket just under 16 ms, so hours recorded before the upgrade read as they did;
`manage.py usage_rollup` recomputes them from the usage records that are still kept.
"""

from django.db import migrations, models
from django.db.models import F, Value

OLD, SHIFT = 28, 12


def shift_up(apps, schema_editor):
    rollup = apps.get_model("routing", "UsageRollup")
    moved = {f"lat_{i + SHIFT:02d}": F(f"lat_{i:02d}") for i in range(OLD)}  # right side: the row's old values
    rollup.objects.update(**moved, **{f"lat_{i:02d}": Value(0) for i in range(SHIFT)})


def shift_down(apps, schema_editor):
    rollup = apps.get_model("routing", "UsageRollup")
    first = sum((F(f"lat_{i:02d}") for i in range(1, SHIFT + 1)), F("lat_00"))
    moved = {f"lat_{i:02d}": F(f"lat_{i + SHIFT:02d}") for i in range(1, OLD)}
    rollup.objects.update(lat_00=first, **moved)


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0010_usage_bodies"),
    ]

    operations = [
        *(
            migrations.AddField(model_name="usagerollup", name=f"lat_{i:02d}", field=models.BigIntegerField(default=0))
            for i in range(OLD, OLD + SHIFT)
        ),
        migrations.RunPython(shift_up, shift_down),
    ]
