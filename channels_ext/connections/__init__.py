"""Outbound connections that bring clicks to a gateway with no public URL.

Slack Socket Mode, the Feishu/Lark long connection and Telegram's getUpdates
long polling: a channel with `mode: socket`, `mode: long_connection` or
`mode: polling` gets its clicks over a connection that `python manage.py
channel_connections` opens to the vendor, instead of as HTTP callbacks. See
docs/slack.md §7, docs/feishu.md §7 and docs/telegram.md §6.
"""
