from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('routing', '0006_config_history'),
    ]

    operations = [
        migrations.AddField(
            model_name='usagerecord',
            name='trail',
            field=models.JSONField(blank=True, default=list, help_text='The chain trail: [model id, what happened] per link considered (docs/usage-records.md#trail).'),
        ),
        migrations.AddIndex(
            model_name='usagerecord',
            index=models.Index(fields=['org', 'created_at'], name='usage_org_time'),
        ),
        migrations.AddIndex(
            model_name='usagerecord',
            index=models.Index(fields=['model_used', 'created_at'], name='usage_model_time'),
        ),
        migrations.AddIndex(
            model_name='usagerecord',
            index=models.Index(fields=['key_prefix', 'created_at'], name='usage_key_time'),
        ),
    ]
