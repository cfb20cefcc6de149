"""HookState moves to the hooks app (hooks.HookState), keyed by the agent's name.

Rows are copied before the old table is dropped, so counters, session context
and cached results survive the upgrade.
"""

from django.db import migrations


def copy_to_hooks(apps, schema_editor):
    old = apps.get_model("approvals", "HookState")
    new = apps.get_model("hooks", "HookState")
    rows = old.objects.select_related("agent").iterator(chunk_size=1000)
    batch = []
    for row in rows:
        batch.append(
            new(
                agent=row.agent.name,
                scope=row.scope,
                key=row.key,
                counter=row.counter,
                value=row.value,
                expires_at=row.expires_at,
                updated_at=row.updated_at,
            )
        )
        if len(batch) >= 1000:
            new.objects.bulk_create(batch)
            batch = []
    if batch:
        new.objects.bulk_create(batch)


def copy_back(apps, schema_editor):
    old = apps.get_model("approvals", "HookState")
    new = apps.get_model("hooks", "HookState")
    agents = dict(apps.get_model("approvals", "Agent").objects.values_list("name", "pk"))
    old.objects.bulk_create(
        old(
            agent_id=agents[row.agent],
            scope=row.scope,
            key=row.key,
            counter=row.counter,
            value=row.value,
            expires_at=row.expires_at,
        )
        for row in new.objects.all()
        if row.agent in agents
    )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
        ("hooks", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(copy_to_hooks, copy_back),
        migrations.DeleteModel(name="HookState"),
    ]
