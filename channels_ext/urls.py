from django.urls import path

from channels_ext import views

urlpatterns = [
    path("<slug:name>/callback", views.channel_callback, name="channel-callback"),
]
