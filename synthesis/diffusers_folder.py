"""The local pipeline folder of generator=diffusers, checked before diffusers reads it: every fault
a user can meet in it (no or invalid `model_index.json`, a malformed component entry, a missing
component folder or weight file, a config that is not JSON, pickled weights that could run code)
ends in one line naming the folder or file and what is wrong, never a traceback."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path
from typing import Any

__all__ = ["DiffusersUnavailable", "check_folder", "components", "load_error", "model_content"]

# weight files diffusers and transformers read; the pickled ones are loaded with weights_only=True
SAFE_WEIGHTS = (".safetensors",)
PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt")


class DiffusersUnavailable(ValueError):
    """The diffusers path cannot run: a package, the pipeline folder or one of its parts is missing."""


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise DiffusersUnavailable(f"{path} is not valid JSON: {error}") from error


def components(folder: Path) -> list[str]:
    """The components `model_index.json` names (those it sets to [null, null] are absent); a
    DiffusersUnavailable naming the file if it is not a JSON object of [library, class] entries."""
    index = folder / "model_index.json"
    content = _json(index)
    if not isinstance(content, dict):
        raise DiffusersUnavailable(
            f"{index} must be a JSON object (component: [library, class]), not a {type(content).__name__}"
        )
    present = []
    for name, entry in content.items():
        if name.startswith("_") or not isinstance(entry, list):  # _class_name, requires_safety_checker...
            continue
        if len(entry) != 2 or not (all(isinstance(v, str) for v in entry) or entry == [None, None]):
            raise DiffusersUnavailable(
                f"{index}: component {name!r} must be [library, class] (or [null, null] for none), "
                f"got {json.dumps(entry)}"
            )
        if entry[0] is not None:
            present.append(name)
    return sorted(present)


def check_folder(model: str | None) -> Path:
    """The pipeline folder, after checking what diffusers would otherwise fail on with a traceback
    or a message that names no file."""
    if not model:
        raise DiffusersUnavailable(
            "generator=diffusers needs generator.model=/path/to/a/local/pipeline "
            "(a folder written by diffusers' save_pretrained, with model_index.json)"
        )
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise DiffusersUnavailable(
            f"diffusers pipeline folder {folder} does not exist; nothing is downloaded, "
            "so the weights must be on this machine"
        )
    if not (folder / "model_index.json").is_file():
        raise DiffusersUnavailable(
            f"{folder} has no model_index.json: not a diffusers pipeline folder "
            "(save one with pipeline.save_pretrained(folder))"
        )
    names = components(folder)
    missing = [name for name in names if not (folder / name).is_dir()]
    if missing:
        raise DiffusersUnavailable(
            f"{folder} lacks the component folder(s) {', '.join(missing)} that model_index.json names"
        )
    for name in names:
        _check_component(folder / name)
    return folder


def _check_component(part: Path) -> None:
    """Its JSON files parse (configs, tokenizers), and a model (a folder with config.json; not a
    scheduler, tokenizer or feature extractor) has a weight file."""
    for path in sorted(part.glob("*.json")):
        content = _json(path)
        if path.name.endswith("config.json") and not isinstance(content, dict):
            raise DiffusersUnavailable(f"{path} must be a JSON object, not a {type(content).__name__}")
    weights = [p for p in part.iterdir() if p.is_file() and p.suffix in SAFE_WEIGHTS + PICKLED_WEIGHTS]
    if (part / "config.json").is_file() and not weights:
        raise DiffusersUnavailable(
            f"{part} has no weights: no weight file ({', '.join('*' + s for s in SAFE_WEIGHTS + PICKLED_WEIGHTS)}) "
            f"beside its config.json (component {part.name} of model_index.json)"
        )


def load_error(folder: Path, error: BaseException) -> DiffusersUnavailable:
    """What diffusers or transformers raised while loading `folder`, as one line: pickled weights
    refused by the safe loader are said as such, with the pickled files named."""
    chain, seen = [], error
    while seen is not None and len(chain) < 16:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if any(isinstance(e, pickle.UnpicklingError) for e in chain):
        pickled = sorted(
            str(p.relative_to(folder)) for p in folder.glob("*/*") if p.is_file() and p.suffix in PICKLED_WEIGHTS
        )
        return DiffusersUnavailable(
            f"refused the pickled weights in {folder} ({', '.join(pickled) or 'a pickled file'}): they hold more "
            "than plain tensors, and loading them could run code; the toolkit loads weights only safely "
            "(save the pipeline with safetensors)"
        )
    message = " ".join(str(error).split()) or type(error).__name__
    if (root := " ".join(str(chain[-1]).split())) and root not in message:  # why, when the top says only what
        message += f" ({root})"
    if len(message) > 400:
        message = message[:400] + "..."
    return DiffusersUnavailable(f"cannot load the diffusers pipeline in {folder}: {message}")


EDGE_BYTES = 1 << 20  # read from each end of a file for its digest


def model_content(folder: Path) -> str:
    """A digest of the pipeline's files (model_index.json and every file of the components it names):
    their names, sizes and the bytes at both ends of each. A fine-tune has its base model's file
    names and sizes but other tensors at both ends, so it is told apart; a moved or copied folder is
    not, and gigabytes of weights are not read."""
    parts = [folder / name for name in components(folder)]
    files = [folder / "model_index.json"] + sorted(
        path
        for part in parts
        for path in part.rglob("*")
        if path.is_file() and not any(p.startswith(".") for p in path.relative_to(folder).parts)
    )
    digest = hashlib.sha256()
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.relative_to(folder).as_posix()}\0{size}\0".encode())
        with path.open("rb") as handle:
            digest.update(handle.read(EDGE_BYTES))
            handle.seek(max(EDGE_BYTES, size - EDGE_BYTES))
            digest.update(handle.read())
    return digest.hexdigest()
