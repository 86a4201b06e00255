"""Shapes of the knowledge-base API. Values are checked by the services, with stable codes."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers

from config.api import ApiError
from memory.knowledge.services import DocumentFields
from memory.models import KnowledgeChunk, KnowledgeDocument, KnowledgeKind


class KnowledgeDocumentSerializer(serializers.ModelSerializer[KnowledgeDocument]):
    published = serializers.BooleanField(read_only=True)

    class Meta:
        model = KnowledgeDocument
        fields = [
            "id",
            "title",
            "category",
            "kind",
            "body",
            "applies_to",
            "published",
            "published_at",
            "content_hash",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


# Blank and over-long values pass here on purpose: the service refuses them with its own codes
# (empty_title, body_too_long, invalid_kind, ...), the same for the API and every other caller.
class KnowledgeDocumentUpdateSerializer(serializers.Serializer[Any]):
    title = serializers.CharField(allow_blank=True, trim_whitespace=False, required=False)
    body = serializers.CharField(allow_blank=True, trim_whitespace=False, required=False)
    kind = serializers.CharField(
        allow_blank=True, required=False, help_text=f"One of {', '.join(KnowledgeKind.values)}."
    )
    category = serializers.CharField(allow_blank=True, trim_whitespace=False, required=False)
    applies_to = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        help_text="Skills only: the agent names it is for; empty means every agent.",
    )


class KnowledgeDocumentCreateSerializer(KnowledgeDocumentUpdateSerializer):
    title = serializers.CharField(allow_blank=True, trim_whitespace=False)
    body = serializers.CharField(allow_blank=True, trim_whitespace=False)
    kind = serializers.CharField(allow_blank=True, default=KnowledgeKind.ARTICLE)
    category = serializers.CharField(allow_blank=True, trim_whitespace=False, default="")
    applies_to = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False), default=list
    )
    publish = serializers.BooleanField(default=False, help_text="Publish at once.")

    def to_fields(self, data: dict[str, Any]) -> DocumentFields:
        return DocumentFields(
            title=data["title"],
            body=data["body"],
            kind=data["kind"],
            category=data["category"],
            applies_to=tuple(data["applies_to"]),
        )


class KnowledgeChunkSerializer(serializers.ModelSerializer[KnowledgeChunk]):
    embedded = serializers.SerializerMethodField(help_text="Whether the chunk has its vector yet.")

    class Meta:
        model = KnowledgeChunk
        fields = ["id", "position", "heading", "text", "content_hash", "embedded"]
        read_only_fields = fields

    def get_embedded(self, chunk: KnowledgeChunk) -> bool:
        return chunk.embedding is not None


class KnowledgeSearchRequestSerializer(serializers.Serializer[Any]):
    query = serializers.CharField(max_length=10000, allow_blank=True, trim_whitespace=False)
    top_k = serializers.IntegerField(required=False, default=5)

    def validate_query(self, value: str) -> str:
        if not value.strip():
            raise ApiError(code="empty_query", message="The query is empty or only whitespace.")
        return value

    def validate_top_k(self, value: int) -> int:
        if not 1 <= value <= settings.SEARCH_MAX_TOP_K:
            raise ApiError(
                code="invalid_top_k",
                message=f"top_k must be between 1 and {settings.SEARCH_MAX_TOP_K}.",
            )
        return value


class KnowledgeHitSerializer(serializers.Serializer[Any]):
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    title = serializers.CharField(help_text="The document's title.")
    heading = serializers.CharField(help_text="The title and the chunk's section.")
    text = serializers.CharField()
    cosine = serializers.FloatField(
        allow_null=True, help_text="Cosine similarity to the query; null without vectors."
    )
    keyword = serializers.FloatField(help_text="Full-text rank (ts_rank_cd); 0 for no match.")
    score = serializers.FloatField(
        help_text="0.6 * normalised cosine + 0.4 * normalised keyword rank, in [0, 1]."
    )


class KnowledgeSearchResultSerializer(serializers.Serializer[Any]):
    results = KnowledgeHitSerializer(many=True, source="hits")
    semantic = serializers.BooleanField(
        help_text="False when the embedder was unavailable and keywords alone ranked."
    )
    took_ms = serializers.FloatField()
