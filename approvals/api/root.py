"""`GET /api/v1/`: which gateway this is — its version and the API's — for a client to say clearly
"this gateway is too old for me" (docs/reference/api.md, "Versions"). Open to anyone, like the schema:
a client may check before it has a working key, and every answer's `X-Gateway-Version` header says the
same already."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

API = "v1"


class ApiRootApi(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(
        auth=[],
        responses={
            200: inline_serializer(
                "ApiRoot",
                {
                    "version": serializers.CharField(help_text="The gateway's version (semantic: MAJOR.MINOR.PATCH)."),
                    "api": serializers.CharField(help_text="The API's major version: `v1`, the prefix of its paths."),
                    "schema": serializers.CharField(help_text="Path of this API's OpenAPI document."),
                    "docs": serializers.CharField(help_text="Path of its browsable reference."),
                },
            )
        },
        summary="The gateway's version",
        description="Open to anyone (no key). Every answer of the gateway names the same version in its "
        "`X-Gateway-Version` header.",
    )
    def get(self, request):
        return Response(
            {"version": settings.GATEWAY_VERSION, "api": API, "schema": "/api/v1/schema/", "docs": "/api/v1/docs/"}
        )
