from django.apps import AppConfig


class ChannelsExtConfig(AppConfig):
    name = "channels_ext"
    verbose_name = "Chat channels"
