"""Teams and sign-in with the organisation's identity provider (issue 21, points 5-6).

Every existing agent and channel joins the default team, which is open to everyone: an install
that never names a team sees and decides exactly what it did before (docs/approving.md, "Teams").
A group of the people directory may belong to a team (its members are the team's members).
"""

import approvals.models
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def make_the_default_team(apps, schema_editor):
    Team = apps.get_model("approvals", "Team")
    Team.objects.get_or_create(name="default", defaults={"everyone": True})


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0013_questions'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Team',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.SlugField(max_length=64, unique=True)),
                ('everyone', models.BooleanField(default=False, help_text='Every signed-in user is a member (the default team of a single-team install starts so).')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('members', models.ManyToManyField(blank=True, related_name='gateway_teams', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.RunPython(make_the_default_team, migrations.RunPython.noop),
        migrations.AddField(
            model_name='agent',
            name='team',
            field=models.ForeignKey(default=approvals.models.default_team_id, on_delete=django.db.models.deletion.PROTECT, related_name='agents', to='approvals.team'),
        ),
        migrations.AddField(
            model_name='channel',
            name='team',
            field=models.ForeignKey(default=approvals.models.default_team_id, on_delete=django.db.models.deletion.PROTECT, related_name='channels', to='approvals.team'),
        ),
        migrations.AddField(
            model_name='peoplegroup',
            name='team',
            field=models.ForeignKey(blank=True, help_text='Its members are members of this team (docs/approving.md, "Teams"); empty: of none.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='groups', to='approvals.team'),
        ),
        migrations.CreateModel(
            name='IdentityProviderLink',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('issuer', models.CharField(max_length=500)),
                ('subject', models.CharField(max_length=255)),
                ('email', models.EmailField(blank=True, help_text='As the identity provider last said.', max_length=254)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('last_signed_in_at', models.DateTimeField(blank=True, null=True)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='idp_links', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'identity provider link',
                'constraints': [models.UniqueConstraint(fields=('issuer', 'subject'), name='uniq_idp_subject')],
            },
        ),
    ]
