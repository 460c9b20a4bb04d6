from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('routing', '0008_key_usage'),
    ]

    operations = [
        migrations.CreateModel(
            name='UsageRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('grouping', models.CharField(max_length=8)),
                ('bucket', models.DateTimeField(help_text='Start of the hour (UTC).')),
                ('org', models.CharField(blank=True, max_length=64)),
                ('agent', models.CharField(blank=True, max_length=64)),
                ('key_prefix', models.CharField(blank=True, max_length=16)),
                ('model_used', models.CharField(blank=True, max_length=200)),
                ('provider', models.CharField(blank=True, max_length=64)),
                ('requests', models.BigIntegerField(default=0)),
                ('errors', models.BigIntegerField(default=0)),
                ('client_errors', models.BigIntegerField(default=0)),
                ('fallbacks', models.BigIntegerField(default=0)),
                ('prompt_tokens', models.BigIntegerField(default=0)),
                ('completion_tokens', models.BigIntegerField(default=0)),
                ('cost', models.DecimalField(decimal_places=8, default=0, max_digits=20)),
                ('lat_00', models.BigIntegerField(default=0)),
                ('lat_01', models.BigIntegerField(default=0)),
                ('lat_02', models.BigIntegerField(default=0)),
                ('lat_03', models.BigIntegerField(default=0)),
                ('lat_04', models.BigIntegerField(default=0)),
                ('lat_05', models.BigIntegerField(default=0)),
                ('lat_06', models.BigIntegerField(default=0)),
                ('lat_07', models.BigIntegerField(default=0)),
                ('lat_08', models.BigIntegerField(default=0)),
                ('lat_09', models.BigIntegerField(default=0)),
                ('lat_10', models.BigIntegerField(default=0)),
                ('lat_11', models.BigIntegerField(default=0)),
                ('lat_12', models.BigIntegerField(default=0)),
                ('lat_13', models.BigIntegerField(default=0)),
                ('lat_14', models.BigIntegerField(default=0)),
                ('lat_15', models.BigIntegerField(default=0)),
                ('lat_16', models.BigIntegerField(default=0)),
                ('lat_17', models.BigIntegerField(default=0)),
                ('lat_18', models.BigIntegerField(default=0)),
                ('lat_19', models.BigIntegerField(default=0)),
                ('lat_20', models.BigIntegerField(default=0)),
                ('lat_21', models.BigIntegerField(default=0)),
                ('lat_22', models.BigIntegerField(default=0)),
                ('lat_23', models.BigIntegerField(default=0)),
                ('lat_24', models.BigIntegerField(default=0)),
                ('lat_25', models.BigIntegerField(default=0)),
                ('lat_26', models.BigIntegerField(default=0)),
                ('lat_27', models.BigIntegerField(default=0)),
            ],
            options={
                'indexes': [models.Index(fields=['grouping', 'org', 'bucket'], name='rollup_org_time'), models.Index(fields=['grouping', 'model_used', 'bucket'], name='rollup_model_time'), models.Index(fields=['grouping', 'key_prefix', 'bucket'], name='rollup_key_time')],
                'constraints': [models.UniqueConstraint(fields=('grouping', 'bucket', 'org', 'agent', 'key_prefix', 'model_used', 'provider'), name='usage_rollup_key')],
            },
        ),
    ]
