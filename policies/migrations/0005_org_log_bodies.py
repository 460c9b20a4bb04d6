from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('policies', '0004_apikey_note'),
    ]

    operations = [
        migrations.AddField(
            model_name='org',
            name='log_bodies',
            field=models.BooleanField(default=False, help_text="Store request and response bodies (size-capped) with this org's usage records; superusers see them in the request log (docs/operations.md#bodies). Off: never stored."),
        ),
    ]
