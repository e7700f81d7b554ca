"""A small report as one HTML file: its pictures as data: URIs and its rows' data inline, so it can
be mailed or archived as it is. A larger one keeps its pictures in the sibling folder, where the
browser loads only the ones it shows (a page of data: URIs is read whole before anything shows)."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import unquote

EMBED_LIMIT_BYTES = 4_000_000  # pictures of an embedded page, counted each time the page or its data shows one
MEDIA_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png"}
PICTURE_FIELDS = ("thumb", "overlay", "mask")
SOURCE = re.compile(r'src="([^"]*)"')  # user text is escaped, so `"` only ends attributes the page wrote


def embedded_body(
    body: str, payload: Mapping[str, Any], files: Path, base: Path, limit: int = EMBED_LIMIT_BYTES
) -> tuple[str, dict[str, Any]] | None:
    """`body` (HTML linking pictures under `files`, relative to the page's folder `base`) and the
    rows' `payload` with every such picture as a data: URI; None when those pictures take more than
    `limit` bytes (each showing counted: a picture in the table and in the rows' data counts twice)."""
    folder = files.resolve()

    def picture(link: str) -> Path | None:
        path = (base / link).resolve()
        return path if path.suffix.lower() in MEDIA_TYPES and path.is_relative_to(folder) and path.is_file() else None

    in_body = [unquote(html.unescape(match)) for match in SOURCE.findall(body)]
    in_data = [row[field] for row in payload.get("rows", []) for field in PICTURE_FIELDS if row.get(field)]
    shown = [path for path in map(picture, in_body + in_data) if path is not None]
    if sum(path.stat().st_size for path in shown) > limit:
        return None
    uris: dict[Path, str] = {}

    def uri(link: str) -> str | None:
        path = picture(link)
        if path is None:
            return None
        if path not in uris:
            media = MEDIA_TYPES[path.suffix.lower()]
            uris[path] = f"data:{media};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"
        return uris[path]

    def embed(match: re.Match) -> str:
        found = uri(unquote(html.unescape(match.group(1))))
        return match.group(0) if found is None else f'src="{found}"'

    body = SOURCE.sub(embed, body)
    rows = [
        {**row, **{f: uri(row[f]) or row[f] for f in PICTURE_FIELDS if row.get(f)}} for row in payload.get("rows", [])
    ]
    return body, {**payload, "rows": rows}


def data_script(payload: Mapping[str, Any]) -> str:
    """The rows' data as script text: the JSON escapes `<`, so no name can close the script element."""
    text = json.dumps(payload, ensure_ascii=True, allow_nan=False).replace("<", "\\u003c")
    return f"window.REPORT_DATA = {text};\n"
