"""Building an index: describe the new panels of an input and add them, resumably and under a lock.

A file already recorded with the same size and modification time is skipped (incremental add;
a killed build resumes at its last commit). A file no decoder reads is recorded as an error row
(`files.status = error`, its reason in `error`) and retried when it changes. With `shard=i/n` the
build describes every n-th file into `<index>/parts/<i>-of-<n>/`, an index of its own;
`merge=true` folds the parts into the index with FAISS's `merge_from` (ids shifted past the
index's own) and records their panels. With `workers=N` the panels are described in N processes
on one machine; their vectors are added and committed by the build's own process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import cv2
import numpy as np

from collection.descriptors import SLOTS, make_descriptor
from collection.panels import split_figure
from collection.store import FLAT_MAX, PanelStore, choose_type, faiss_module
from datamodules.io import ImageReadError, file_in_the_way, read_image
from datamodules.layouts import records_from_input
from datamodules.records import Record
from inference.parts import Shard

log = logging.getLogger(__name__)


def source_ids(
    input: str | os.PathLike, layout: str = "auto", keep: Callable[[list[Record]], list[Record]] | None = None
) -> list[tuple[str, str]]:
    """(absolute path, source id) of every image of the input: its `review` column, else its `group`
    column, else its folder's name. Absolute, so a search run from another folder reads the panels
    again, and a folder given once as `archive/` and once as `/data/archive/` is indexed once; a
    symbolic link keeps its own name (the path the user gave), as infer.py's rows do. `keep` filters
    the records first (a search's own outputs inside its input folder are no query)."""
    records = records_from_input(input, layout)
    records = keep(records) if keep else records
    found: dict[str, str] = {}  # a file listed twice is one file (its first listing's source id)
    for r in records:
        found.setdefault(os.path.abspath(r.path), r.review or r.group or Path(r.path).parent.name)
    return list(found.items())


def open_store(
    index_dir: str | os.PathLike,
    descriptor: str,
    create: bool = False,
    checkpoint: str | None = None,
    device: str = "cpu",
) -> PanelStore:
    """The index at `index_dir`, described by `descriptor` (checked against the stored name); `checkpoint`:
    the weights of a learned descriptor (`pairnet`), else those recorded in the index; `device`: where
    a learned descriptor's network runs."""
    described = make_descriptor(descriptor, index_dir, checkpoint, device)
    store = PanelStore(index_dir, described, create=create)
    codebook = getattr(described, "codebook", None)
    if codebook is not None and not (Path(index_dir) / "codebook.npy").is_file():
        np.save(Path(index_dir) / "codebook.npy", codebook)  # the words travel with the index
    return store


def file_panels(image: np.ndarray, split: bool) -> list[tuple[tuple[int, int, int, int], np.ndarray]]:
    boxes = split_figure(image) if split else [(0, 0, image.shape[1], image.shape[0])]
    return [((x0, y0, x1, y1), image[y0:y1, x0:x1]) for x0, y0, x1, y1 in boxes]


def described(descriptor: Any, panel: np.ndarray) -> tuple[np.ndarray, bytes]:
    """A panel's vectors and, for a descriptor with keypoints (`local_sift`), their packed positions."""
    if hasattr(descriptor, "describe_located"):
        return descriptor.describe_located(panel)
    return descriptor.describe(panel), b""


def describe_file(path: str, split_panels: bool, descriptor: Any) -> tuple[list[tuple[Any, ...]], str]:
    """([(box, vectors, points) per panel], "") of a readable file, ([], reason) of another."""
    try:
        panels = file_panels(read_image(path), split_panels)
        return [(box, *described(descriptor, panel)) for box, panel in panels], ""
    except (ImageReadError, OSError, ValueError) as error:
        return [], str(error)


_worker_descriptor: Any = None


def _start_worker(descriptor: str, index_dir: str, device: str) -> None:
    global _worker_descriptor
    cv2.setNumThreads(1)
    _worker_descriptor = make_descriptor(descriptor, index_dir, device=device)


def _describe_in_worker(job: tuple[str, bool]) -> tuple[list[tuple[Any, ...]], str]:
    return describe_file(*job, _worker_descriptor)


def described_files(
    paths: list[str], descriptor: Any, split_panels: bool, workers: int, index_dir: str = ""
) -> Iterator[tuple[list[tuple[Any, ...]], str]]:
    """`describe_file` of each path, in order; with `workers` > 1 in that many fresh processes (the
    describing is nearly all of a build's time, the FAISS adds and commits stay in this one; forked
    copies of a process whose thread pools have run can deadlock, hence spawned ones)."""
    if workers <= 1:
        yield from (describe_file(path, split_panels, descriptor) for path in paths)
        return
    name, device = descriptor.name.split("-")[0], getattr(descriptor, "device", "cpu")
    pool = multiprocessing.get_context("spawn").Pool(workers, _start_worker, (name, index_dir, device))
    try:
        yield from pool.imap(_describe_in_worker, ((path, split_panels) for path in paths), chunksize=8)
    finally:
        pool.terminate()


def describe_files(
    store: PanelStore,
    items: list[tuple[str, str]],
    split_panels: bool = False,
    commit_every: int = 256,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Describe and add the files not yet in `store` (same size and mtime); commit every `commit_every`."""
    known = store.known_files()
    counts = {"files": 0, "panels": 0, "errors": 0, "skipped": 0, "seconds": 0.0}
    started = time.perf_counter()
    todo = []
    for path, source_id in items:
        size, mtime = file_stamp(path)
        if path in known and known[path][:2] == (size, mtime):
            counts["skipped"] += 1
        else:
            todo.append((path, source_id, size, mtime))
    paths = [path for path, *_ in todo]
    per_panel = getattr(store.descriptor, "keypoints", 10)  # the index type follows what it will hold
    store.expected_vectors = (store.index.ntotal if store.index is not None else 0) + per_panel * len(todo)
    results = described_files(paths, store.descriptor, split_panels, workers, str(store.directory))
    for number, ((path, source_id, size, mtime), (panels, error)) in enumerate(zip(todo, results), 1):
        if path in known:
            store.forget(path)
        if error:
            log.warning("%s", error if path in error else f"{path}: {error}")  # read errors name their file
            store.add_file(path, size, mtime, "error", error, 0)
            counts["errors"] += 1
        else:
            for box, vectors, points in panels:
                store.add_panel(path, box, source_id, vectors, points)
            store.add_file(path, size, mtime, "ok", "", len(panels))
            counts["files"] += 1
            counts["panels"] += len(panels)
        if number % commit_every == 0:
            store.commit()
        if progress is not None:
            progress(number, len(todo))
    store.commit()
    counts["seconds"] = time.perf_counter() - started
    return counts


def build_index(
    input: str | os.PathLike,
    index_dir: str | os.PathLike,
    descriptor: str = "local_sift",
    layout: str = "auto",
    split_panels: bool = False,
    shard: str | None = None,
    index_type: str = "auto",
    commit_every: int = 256,
    workers: int = 1,
    checkpoint: str | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Add the input's new panels to the index at `index_dir` (created when absent); `checkpoint`:
    the weights of a learned descriptor (`pairnet`), run on `device`."""
    choose_type(index_type, 0)  # a wrong name or count refused before any file is read
    if int(workers) < 1:
        raise ValueError(f"workers must be 1 or more, got {workers}")
    if int(commit_every) < 1:
        raise ValueError(f"commit_every must be 1 or more, got {commit_every}")
    if Path(index_dir).exists() and not Path(index_dir).is_dir():
        raise ValueError(f"index {index_dir} is a file: an index is a folder")
    if blocking := file_in_the_way(index_dir, itself=False):
        raise ValueError(f"index {index_dir}: {blocking} is a file, not a folder")
    items = source_ids(input, layout)
    if not items:  # a mistyped or empty folder would make an empty index, said as a success
        raise ValueError(f"no images found in {input}: nothing to index")
    parsed = Shard.parse(shard)
    target, already = Path(index_dir), 0
    if parsed.count > 1:
        items = [item for position, item in enumerate(items) if position % parsed.count == parsed.index]
        new = not_indexed_yet(items, index_dir, descriptor, checkpoint)  # a part holds only what is new
        items, already = new, len(items) - len(new)
        target = target / "parts" / f"{parsed.index}-of-{parsed.count}"
    store = open_store(target, descriptor, create=True, checkpoint=checkpoint, device=device).lock()
    try:
        if parsed.count > 1:
            index_type = part_template(store, index_dir, descriptor, checkpoint)
        split = str(bool(split_panels)).lower()
        if store.state("split_panels", split) != split:  # its files would be skipped, unsplit as they are
            raise ValueError(
                f"{target} was built with split_panels={store.state('split_panels')}: give the same, "
                "or build another index"
            )
        with store.db:
            store.db.execute("INSERT OR REPLACE INTO state VALUES ('requested_type', ?)", (index_type,))
            store.db.execute("INSERT OR REPLACE INTO state VALUES ('split_panels', ?)", (split,))
        counts = describe_files(store, items, split_panels, commit_every, workers=workers)
        counts["skipped"] += already
        if parsed.count == 1:  # a part does not know the index's files: brought up to date after its merge
            counts["removed"] = up_to_date_with(store, input, items)
        counts.update({"index": str(target), "index_type": store.index_type, "total_panels": store.n_panels})
        return counts
    finally:
        store.close()


def up_to_date_with(store: PanelStore, input: str | os.PathLike, items: list[tuple[str, str]]) -> int:
    """After a whole build: the files indexed before take the source ids the input gives them now
    (a folder indexed again from a manifest with `review` ids; `exclude_same=review` reads them),
    and those gone from the input folder are forgotten (`forget_removed`, whose count is returned)."""
    resourced = store.set_sources(items)
    if resourced:
        log.info("%d file(s) already indexed take the source ids this input gives them", resourced)
    return forget_removed(store, input, items)


def forget_removed(store: PanelStore, input: str | os.PathLike, items: list[tuple[str, str]]) -> int:
    """Forget the files of the input folder the index holds that are gone from the disk: a search
    would list their panels as reuse no one can open. Files of other folders (an index built from
    several) and of a manifest's input are left as they are."""
    if not Path(input).is_dir():
        return 0
    folder, listed = os.path.join(os.path.abspath(input), ""), {path for path, _ in items}
    gone = [p for p in store.known_files() if p.startswith(folder) and p not in listed and not os.path.lexists(p)]
    for path in gone:
        store.forget(path, removed=True)
    store.commit()
    if gone:
        log.info("%d file(s) no longer in %s: their panels are removed from the index", len(gone), input)
    return len(gone)


def index_up_to_date(
    input: str | os.PathLike, index_dir: str | os.PathLike, descriptor: str, layout: str, checkpoint: str | None
) -> int:
    """`up_to_date_with` on a whole index (one not made yet holds nothing to update), as the parts of
    a several-process build are merged into it."""
    if not (Path(index_dir) / "meta.json").is_file():
        return 0
    store = open_store(index_dir, descriptor, checkpoint=checkpoint).lock()
    try:
        return up_to_date_with(store, input, source_ids(input, layout))
    finally:
        store.close()


def not_indexed_yet(
    items: list[tuple[str, str]], index_dir: str | os.PathLike, descriptor: str, checkpoint: str | None
) -> list[tuple[str, str]]:
    """The items the index at `index_dir` does not hold as they are now (same size and mtime): a
    shard's part describes these only, so a rerun over an unchanged archive adds nothing."""
    if not (Path(index_dir) / "meta.json").is_file():
        return items
    main = open_store(index_dir, descriptor, checkpoint=checkpoint)
    try:
        known = main.known_files()
    finally:
        main.close()
    return [(path, source) for path, source in items if known.get(path, (None, None))[:2] != file_stamp(path)]


def file_stamp(path: str) -> tuple[int, float]:
    """(size, mtime) of a file, (-1, 0.0) when it cannot be read: what tells a changed file."""
    try:
        stat = os.stat(path)
    except OSError:
        return -1, 0.0
    return stat.st_size, stat.st_mtime


def part_template(
    part: PanelStore, index_dir: str | os.PathLike, descriptor: str, checkpoint: str | None = None
) -> str:
    """What a shard's part starts from: a trained IVF index of the main index emptied (so the parts
    merge with `merge_from`), else a flat index (the merge trains the IVF when the total needs one)."""
    if part.index is not None or not (Path(index_dir) / "meta.json").is_file():
        return part.state("requested_type", "flat") or "flat"
    main = open_store(index_dir, descriptor, checkpoint=checkpoint)
    try:
        if main.index is None or main.index_type == "flat":
            return "flat"
        part.index = faiss_module().clone_index(main.index)
        part.index.reset()
        part._new_type = main.index_type
        return main.index_type
    finally:
        main.close()


def merge_parts(
    index_dir: str | os.PathLike, descriptor: str = "local_sift", checkpoint: str | None = None
) -> dict[str, Any]:
    """Fold `<index>/parts/*` into the index: vectors with FAISS's merge_from, panels and files re-numbered."""
    faiss = faiss_module()
    parts = sorted((Path(index_dir) / "parts").glob("*-of-*"))
    if not parts:
        raise ValueError(f"no index parts under {Path(index_dir) / 'parts'}: build with shard=i/n first")
    made = {tuple(int(n) for n in part.name.split("-of-")) for part in parts}
    if len({count for _, count in made}) > 1 or len(made) != next(iter(made))[1]:
        names = ", ".join(sorted(part.name for part in parts))
        raise ValueError(f"the parts under {Path(index_dir) / 'parts'} ({names}) are not one whole splitting i-of-n")
    for part_dir in parts:  # each part built with this descriptor, checked before the index is made
        open_store(part_dir, descriptor, checkpoint=checkpoint).close()
    main = open_store(index_dir, descriptor, create=True, checkpoint=checkpoint).lock()
    merged = {"parts": len(parts), "panels": 0}
    try:
        for part_dir in parts:
            part = open_store(part_dir, descriptor, checkpoint=checkpoint).lock()
            offset = main.next_id
            rows = part.db.execute(
                "SELECT id, path, box, source_id, n_vectors, points FROM panels ORDER BY id"
            ).fetchall()
            if part.index is not None and part.index.ntotal:
                if main.index is None:
                    main.index = faiss.clone_index(part.index)
                    main.index.reset()
                    main._new_type = part.index_type
                if part.index_type == main.index_type or main.index is not None and main.index.ntotal == 0:
                    main.index.merge_from(part.index, offset * SLOTS)  # FAISS's own merge, ids shifted
                else:  # a flat part into an IVF index: its vectors are added (reconstructed exactly)
                    vectors = part.index.index.reconstruct_n(0, part.index.ntotal)
                    ids = faiss.vector_to_array(part.index.id_map).astype(np.int64) + offset * SLOTS
                    main.add_vectors(vectors, ids)
            files = part.db.execute("SELECT * FROM files").fetchall()
            known = main.known_files()
            for path in {row[0] for row in files} & set(known):  # a file changed since: the part's is now
                main.forget(path)
            main.pending.extend((pid + offset, *rest) for pid, *rest in rows)
            main.pending_files.extend(files)
            split = part.state("split_panels")
            if split is not None:  # the parts' setting is the index's (a part of the other one is refused)
                if main.state("split_panels", split) != split:
                    raise ValueError(f"{part_dir} was built with split_panels={split}, the index with the other")
                with main.db:
                    main.db.execute("INSERT OR REPLACE INTO state VALUES ('split_panels', ?)", (split,))
            main.next_id = offset + (rows[-1][0] + 1 if rows else 0)
            merged["panels"] += len(rows)
            part.close()
        if main.index_type == "flat" and main.index is not None and main.index.ntotal > FLAT_MAX:
            main.add_vectors(np.zeros((0, main.descriptor.dim), np.float32), np.zeros(0, np.int64), "auto")
        main.commit()
        shutil.rmtree(Path(index_dir) / "parts")
        merged.update({"total_panels": main.n_panels, "index_type": main.index_type})
        return merged
    finally:
        main.close()
