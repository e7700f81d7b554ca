"""The authentic photos a dataset is generated from: a key, a source (what splits group by) and a
category for each, stamped into the output with the options, so a folder never mixes items made
from other photos or with other options."""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any, Sequence

from synthesis.spec import DatasetSpec

_LABEL_FOLDERS = {"0_real", "real", "1_fake", "fake"}


def scene_of(name: str) -> str:
    """The source a photo's images are split by, from its name (file stem): one for both halves of a
    stereo pair (`motorcycle_left` / `motorcycle_right` show one scene, so a split between them would leak)."""
    return name.removesuffix("_left").removesuffix("_right")


def photo_table(photos: Sequence[str | os.PathLike] | None, root: str | os.PathLike | None) -> list[dict[str, str]]:
    """key (unique file name stem), source (what splits group by) and category of every photo."""
    if photos is None:
        from synthesis.embedded import bundled_photo_paths

        paths, root = bundled_photo_paths(), None
    else:
        paths = [Path(p) for p in photos]
    table, seen = [], set()
    for path in sorted(paths, key=str):
        rel = Path(path).relative_to(root) if root is not None and Path(path).is_relative_to(root) else Path(path.name)
        # label folders of a 0_real/1_fake tree say nothing about the content
        rel = Path(*[p for p in rel.parent.parts if p.lower() not in _LABEL_FOLDERS], rel.name)
        key = "__".join(rel.with_suffix("").parts).replace(" ", "_")
        if key in seen:
            key = f"{key}_{zlib.crc32(str(path).encode()):08x}"
        seen.add(key)
        source = scene_of(key)
        category = rel.parts[0] if len(rel.parts) > 1 else (key if root is None else None)
        table.append({"photo": str(path), "key": key, "source": source, "category": category})
    return table


def photos_digest(paths: Sequence[str | os.PathLike]) -> str:
    """One digest of the photos' names and bytes: a folder made from photos of the same names but
    other content is told apart from its own."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).name.encode() + b"\0")
        try:
            digest.update(Path(path).read_bytes())
        except OSError:  # an unreadable photo is skipped (and said) where it is read
            digest.update(b"unreadable")
    return digest.hexdigest()


# What a generation writes at the top of its output folder (beside `.items/`, its own bookkeeping).
GENERATED_NAMES = (
    "contact_sheet.png",
    "duplication_pairs.csv",
    "fake",
    "generators",
    "manifest.csv",
    "masks",
    "real",
    "sources",
)


def check_crop_categories(spec: DatasetSpec, table: list[dict[str, str]], bundled: bool) -> None:
    """`panels.crops_by_category` names categories the dataset has (a misspelt one was ignored),
    before the options are stamped."""
    categories = {p["category"] for p in table} if not (bundled and spec.genuine_kinds) else {"photo"}
    categories |= set(spec.genuine_kinds or {})
    if unknown := sorted(set(spec.crops_by_category) - categories):
        raise ValueError(
            f"panels.crops_by_category names {', '.join(unknown)}, no category of these photos; "
            f"they have {', '.join(sorted(map(str, categories)))}"
        )


def differing_options(earlier: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """The options a stamp and a run disagree on (a backend's own, such as generator=diffusers',
    as `generator.<option>`). A backend option the stamp lacks was not stamped by the toolkit that
    wrote it (generator=diffusers' dtype and device before they were): it is taken as it is now,
    as a stamp without a photo digest is, and stamped from this run on."""
    differ = []
    for key in sorted((set(earlier) | set(options)) - {"photos", "photo_digest"}):
        before, now = earlier.get(key), options.get(key)
        if before == now:
            continue
        if key == "backend" and isinstance(before, dict) and isinstance(now, dict):
            differ += [f"generator.{k}" for k in sorted(before) if before[k] != now.get(k)]
        else:
            differ.append("generator" if key == "backend" else key)
    return list(dict.fromkeys(differ))


def made_with(earlier: dict[str, Any], differ: list[str]) -> list[str]:
    """`generator.<option>=value` as the stamp holds it, for the backend options in `differ` that a
    command line gives (not a model's digest): what a run sets to go on with the folder."""
    backend, settings = earlier.get("backend") or {}, []
    for name in differ:
        value = backend.get(name.removeprefix("generator."), {}) if name.startswith("generator.") else {}
        if not isinstance(value, dict):
            text = json.dumps(value, separators=(",", ":"))
            settings.append(f"{name}={value if isinstance(value, str) and value.isidentifier() else text}")
    return settings


def stamped_table(
    output: Path, spec: DatasetSpec, photos: Sequence[str | os.PathLike] | None, root: str | os.PathLike | None
) -> list[dict[str, str]]:
    """The photo table (with the genuine kinds' sources written), checked against and stamped into
    `output`, so a folder never mixes items made with other options or photos. The options are
    checked and stamped before anything is written: a run killed while it wrote the sources is
    resumed only with the same options, and a folder of other files is never written over."""
    check_crop_categories(spec, photo_table(photos, root), bundled=photos is None)
    stamp = output / ".items" / "spec.json"
    options = spec.fingerprint()
    earlier = json.loads(stamp.read_text()) if stamp.is_file() else None
    if earlier is not None and (differ := differing_options(earlier, options)):
        settings = made_with(earlier, differ)
        again = f" ({' '.join(settings)})" if settings else ""
        raise ValueError(
            f"{output} holds a dataset generated with other options ({', '.join(differ)} differ; {stamp}): "
            f"to go on with it, run with the options it was made with{again}; "
            "else choose a new output folder or delete the old one"
        )
    if earlier is None:
        if found := [name for name in GENERATED_NAMES if (output / name).exists()]:
            raise ValueError(
                f"{output} already holds {', '.join(found)}, which no generation made there (it has no {stamp}): "
                "choose a new or empty output folder"
            )
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps({**options, "photos": None}, indent=1, sort_keys=True))
    table = photo_table(photos, root)
    if spec.genuine_kinds:
        from synthesis.genuine_kinds import write_genuine_sources

        if photos is None:  # the bundled photographs are one kind among the others
            table = [{**p, "category": "photo"} for p in table]
        table += write_genuine_sources(
            output / "sources", spec.genuine_kinds, spec.seed, photos={p["source"]: p["photo"] for p in table}
        )
    if not table:
        raise ValueError("no photos to generate from")
    keys, digest = [p["key"] for p in table], photos_digest([p["photo"] for p in table])
    # a stamp of an earlier version has no digest: its photos are known by name only
    if earlier is not None and (
        earlier.get("photos") not in (None, keys) or earlier.get("photo_digest") not in (None, digest)
    ):
        raise ValueError(
            f"{output} holds a dataset generated from other photos ({stamp}); "
            "choose a new output folder or delete the old one"
        )
    stamp.write_text(json.dumps({**options, "photos": keys, "photo_digest": digest}, indent=1, sort_keys=True))
    return table
