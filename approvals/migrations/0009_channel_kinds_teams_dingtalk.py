"""Channel kinds `teams` and `dingtalk` (channels_ext.base.CHANNEL_KINDS): the choices of Channel.kind."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0008_one_person_and_judged_edits'),
    ]

    operations = [
        migrations.AlterField(
            model_name='channel',
            name='kind',
            field=models.CharField(choices=[('web', 'web'), ('slack', 'slack'), ('feishu', 'feishu'), ('teams', 'teams'), ('dingtalk', 'dingtalk')], max_length=20),
        ),
    ]
