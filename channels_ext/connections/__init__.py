"""Outbound connections that bring clicks to a gateway with no public URL.

Slack Socket Mode and the Feishu/Lark long connection: a channel with
`mode: socket` or `mode: long_connection` gets its clicks over a connection
that `python manage.py channel_connections` opens to the vendor, instead of
as HTTP callbacks. See docs/slack.md §7 and docs/feishu.md §7.
"""
