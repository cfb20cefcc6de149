"""Digests (docs/policies.md, "Risk"): a card kept for its channel's digest (outbox status `held`, then
`digested`), the `Digest` message that lists the gathered calls (the ids it shows, in order), the outbox rows
that post and redraw it (kinds `digest`, `digest_update`: the kind column grows to 16), and the index the
digest tick reads a channel's held cards by."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0018_request_risk'),
    ]

    operations = [
        migrations.AlterField(
            model_name='outbox',
            name='kind',
            field=models.CharField(choices=[('card', 'Card'), ('update', 'Update'), ('remind', 'Remind'), ('webhook', 'Webhook'), ('digest', 'Digest'), ('digest_update', 'Digest Update')], max_length=16),
        ),
        migrations.AlterField(
            model_name='outbox',
            name='status',
            field=models.CharField(choices=[('pending', 'Pending'), ('sent', 'Sent'), ('failed', 'Failed'), ('held', 'Held'), ('digested', 'Digested')], default='pending', max_length=8),
        ),
        migrations.CreateModel(
            name='Digest',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('shown_ids', models.JSONField(default=list, help_text='The requests this digest lists, in order (uuid text).')),
                ('message_ref', models.JSONField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('posted_at', models.DateTimeField(blank=True, null=True)),
                ('channel', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='digests', to='approvals.channel')),
            ],
            options={
                'ordering': ['-created_at'],
            },
        ),
        migrations.AddField(
            model_name='outbox',
            name='digest',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='outbox', to='approvals.digest'),
        ),
        migrations.AddIndex(
            model_name='outbox',
            index=models.Index(condition=models.Q(('status', 'held')), fields=['channel', 'created_at'], name='outbox_held'),
        ),
    ]
