from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0010_overload"),
    ]

    operations = [
        migrations.AddField(
            model_name="managementtoken",
            name="expires_at",
            field=models.DateTimeField(
                blank=True,
                help_text="After this time (UTC) the token is refused like an unknown one (401). Empty: never expires.",
                null=True,
            ),
        ),
    ]
