from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('routing', '0007_usage_trail_and_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='KeyUsage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key_prefix', models.CharField(max_length=16)),
                ('org', models.CharField(max_length=64)),
                ('agent', models.CharField(max_length=64)),
                ('requests', models.BigIntegerField(default=0)),
                ('spend', models.DecimalField(decimal_places=8, default=0, max_digits=18)),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'verbose_name': 'key usage',
                'verbose_name_plural': 'key usage',
                'constraints': [models.UniqueConstraint(fields=('key_prefix', 'org', 'agent'), name='key_usage_key')],
            },
        ),
    ]
