from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="HookState",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("agent", models.CharField(max_length=64)),
                ("scope", models.CharField(max_length=200)),
                ("key", models.CharField(max_length=200)),
                ("counter", models.IntegerField(default=0)),
                ("value", models.JSONField(blank=True, null=True)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "verbose_name": "hook state",
                "indexes": [models.Index(fields=["expires_at"], name="hooks_state_expiry")],
                "constraints": [models.UniqueConstraint(fields=("agent", "scope", "key"), name="uniq_hooks_state")],
            },
        ),
    ]
