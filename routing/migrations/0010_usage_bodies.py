from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('routing', '0009_usage_rollup'),
    ]

    operations = [
        migrations.AddField(
            model_name='usagerecord',
            name='request_body',
            field=models.TextField(blank=True, default='', help_text='Only for orgs with log_bodies, cut and masked (docs/operations.md#bodies).'),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='response_body',
            field=models.TextField(blank=True, default='', help_text='As request_body; non-streamed answers only.'),
        ),
    ]
