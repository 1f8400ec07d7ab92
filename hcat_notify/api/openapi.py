"""The OpenAPI document of the HTTP API, as committed in ``schemas/openapi.json``.

``python -m hcat_notify.api.openapi schemas/openapi.json`` writes it again after the
API changed; a test fails while the file and the code disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hcat_notify.api.app import create_app
from hcat_notify.config import Settings

__all__ = ["openapi_document", "render"]


def openapi_document() -> dict[str, Any]:
    """The app's OpenAPI document (it does not depend on the settings)."""
    return create_app(Settings()).openapi()


def render() -> str:
    """The document as the committed file holds it."""
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m hcat_notify.api.openapi PATH", file=sys.stderr)
        return 2
    Path(argv[0]).write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
