"""The units of work of a generated dataset and how they run: in order or in worker processes,
each one leaving a done marker so an interrupted run resumes without redoing anything.

A task is a plain dict (picklable for spawned workers): `panels` cuts the genuine panels of one photo,
`generator` trains one autoencoder variant, `item` applies one operation. Each draws from its own
generator seeded by (seed, task id) and uses one thread, so the bytes do not depend on `workers`.
"""

from __future__ import annotations

import json
import os
import threading
import time
import zlib
from collections import Counter
from concurrent.futures import Executor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import cv2
import numpy as np
from tqdm import tqdm

from datamodules.io import ImageReadError, read_image, write_image

__all__ = [
    "item_rng",
    "fragment_path",
    "write_fragment",
    "item_done",
    "run_task",
    "init_worker",
    "one_thread",
    "execute",
]


def item_rng(seed: int, item: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(item.encode())])


def _panels_task(task: dict[str, Any]) -> dict[str, Any]:
    """Genuine panels of one photo: the whole photo (shrunk to max_side) and random rescaled crops."""
    out, spec, photo = Path(task["output"]), task["spec"], task["photo"]
    rng = item_rng(spec["seed"], task["id"])
    try:
        image = read_image(photo["photo"])
    except ImageReadError as error:  # one unreadable source is skipped, as every tool skips bad input
        return {"rows": [], "pairs": [], "panels": [], "skipped": str(error)}
    h, w = image.shape[:2]
    scale = min(1.0, spec["max_side"] / max(h, w))
    full = (
        image if scale == 1.0 else cv2.resize(image, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA)
    )
    crops = [("full", full)]
    for i in range(spec["crops_by_category"].get(photo["category"], spec["crops_per_photo"])):
        s = float(rng.uniform(*spec["crop_scales"]))
        scaled = cv2.resize(image, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
        side = min(spec["crop_size"], *scaled.shape[:2])
        if side < spec["min_panel_side"]:
            continue
        y = int(rng.integers(0, scaled.shape[0] - side + 1))
        x = int(rng.integers(0, scaled.shape[1] - side + 1))
        crops.append((f"c{i}", scaled[y : y + side, x : x + side]))
    rows, panels = [], []
    for suffix, pixels in crops:
        if min(pixels.shape[:2]) < spec["min_panel_side"]:
            continue
        rel = f"real/{photo['key']}_{suffix}.png"
        write_image(out / rel, np.ascontiguousarray(pixels))
        row = {
            "path": rel,
            "label": 0,
            "mask": None,
            "group": "genuine",
            "category": photo["category"],
            "source": photo["source"],
            "split": task["split"],
            "review": None,
        }
        rows.append(row)
        panels.append({**row, "height": int(pixels.shape[0]), "width": int(pixels.shape[1])})
    return {"rows": rows, "pairs": [], "panels": panels}


def _generator_task(task: dict[str, Any]) -> dict[str, Any]:
    from synthesis.generator import psnr, rerender_image, save_generator, train_generator

    out, options = Path(task["output"]), task["training"]
    images = [np.array(read_image(out / p)) for p in task["images"]]  # writable for torch
    started = time.perf_counter()
    model = train_generator(images, task["variant"], seed=task["seed"], **options)
    save_generator(model, task["weights"])
    # how close re-renders are to their input: close enough to pass as the photo, yet re-generated
    quality = [psnr(rerender_image(model, im), im) for im in images[:8]]
    sidecar = {
        "variant": task["variant"],
        "seed": task["seed"],
        "training": options,
        "images": task["images"],
        "psnr_db": round(float(np.mean(quality)), 2),
        "seconds": round(time.perf_counter() - started, 1),
    }
    Path(task["weights"]).with_suffix(".json").write_text(json.dumps(sidecar, indent=1))
    return {"rows": [], "pairs": [], "generator": sidecar}


def _item_task(task: dict[str, Any]) -> dict[str, Any]:
    from synthesis.operations import run_operation

    op, out = task["op"], Path(task["output"])
    rng = item_rng(task["seed"], task["id"])
    if op == "splicing":  # both directions of the pair; either may be refused on its own
        result: dict[str, Any] = {"rows": [], "pairs": []}
        reasons = []
        for bg, donor in ((0, 1), (1, 0)):
            panels = [task["panels"][bg], task["panels"][donor]]
            name = f"{Path(panels[1]['path']).stem}_on_{Path(panels[0]['path']).stem}"
            try:
                result["rows"] += run_operation(op, name, out, panels, rng, task["options"])["rows"]
            except ValueError as error:
                reasons.append(str(error))
        if not result["rows"]:
            raise ValueError("; ".join(reasons))
        return result
    return run_operation(op, task["name"], out, task["panels"], rng, task["options"])


_TASKS = {"panels": _panels_task, "generator": _generator_task, "item": _item_task}


def fragment_path(output: Path, task_id: str) -> Path:
    return output / ".items" / f"{task_id}.json"


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one task and leave its fragment (the done marker) after all its files are written."""
    try:
        result = _TASKS[task["type"]](task)
    except ValueError as error:  # the operation does not apply to this panel: recorded, not retried
        result = {"rows": [], "pairs": [], "skipped": str(error)}
    except Exception as error:
        raise RuntimeError(f"item {task['id']} failed: {type(error).__name__}: {error}") from error
    write_fragment(Path(task["output"]), task["id"], result)
    return result


def write_fragment(output: Path, task_id: str, result: dict[str, Any]) -> None:
    """A task's result as its done marker, written whole (a killed write leaves no marker)."""
    path = fragment_path(output, task_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, sort_keys=True))
    os.replace(tmp, path)


def init_worker() -> None:
    """A worker process: one thread, and gone when the run that started it is (a run killed with
    SIGKILL or SIGTERM leaves its pool's workers behind otherwise, each holding a model)."""
    import torch

    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    threading.Thread(target=exit_with_parent, args=(os.getppid(),), daemon=True).start()


def exit_with_parent(parent: int, every: float = 1.0) -> None:
    """Ends this process once its parent has gone (it is then adopted: another parent id)."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


@contextmanager
def one_thread() -> Iterator[None]:
    """Serial runs use one torch thread like the workers do, so bytes do not depend on `workers`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def item_done(task: dict[str, Any]) -> dict[str, Any] | None:
    """A task's finished result (its fragment, with every file it names still on disk), or None."""
    path = fragment_path(Path(task["output"]), task["id"])
    done = json.loads(path.read_text()) if path.is_file() else None
    if done is not None and all(
        (Path(task["output"]) / row[key]).is_file() for row in done["rows"] for key in ("path", "mask") if row.get(key)
    ):
        return done
    return None


def execute(
    tasks: list[dict[str, Any]], pool: Executor | None, desc: str, progress: bool, counts: Counter
) -> list[dict[str, Any]]:
    """Results in task order; finished tasks are read back from their fragments, the rest run."""
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    todo = []
    for i, task in enumerate(tasks):
        done = item_done(task)
        if done is not None:
            results[i] = done
            counts["reused"] += 1
        else:  # not done, or its files were removed since
            todo.append(i)
    bar = tqdm(total=len(todo), desc=desc, unit="item", disable=not progress or not todo)
    if pool is None:
        for i in todo:
            results[i] = run_task(tasks[i])
            bar.update()
    else:
        futures = {pool.submit(run_task, tasks[i]): i for i in todo}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            bar.update()
    bar.close()
    counts["made"] += len(todo)
    return results  # type: ignore[return-value]
