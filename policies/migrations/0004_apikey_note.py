from django.db import migrations, models


class Migration(migrations.Migration):
    # Another branch adds 0002_encrypted_keys; when both are merged, chain this one after it.
    dependencies = [
        ("policies", "0003_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="note",
            field=models.TextField(
                blank=True, help_text="Who holds the key and what for (operators only; never sent anywhere)."
            ),
        ),
        migrations.AlterField(
            model_name="apikey",
            name="expires_at",
            field=models.DateTimeField(blank=True, help_text="Empty: never expires.", null=True),
        ),
    ]
