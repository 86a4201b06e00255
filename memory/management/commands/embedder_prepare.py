from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from memory.embeddings.local_embedder import LocalEmbedder


class Command(BaseCommand):
    help = (
        "Make the local embedding model's file now (the re-quantized model is made on first "
        "use otherwise), e.g. while building an image (docs/embeddings.md)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.EMBEDDING_BACKEND != "local":
            self.stdout.write(f"EMBEDDING_BACKEND={settings.EMBEDDING_BACKEND}: nothing to make")
            return
        embedder = LocalEmbedder()  # loads the file, so a broken one fails here, not at start
        self.stdout.write(f"{embedder.name}: {embedder.file}")
