from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0003_usage_tokens_estimated"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="breakeraction",
            options={
                "ordering": ["-created_at"],
                "permissions": [("control_breaker", "Can reset or force open circuit breakers")],
            },
        ),
    ]
