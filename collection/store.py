"""An index directory: FAISS vectors, a SQLite table of panels and files, and the build lock.

    <index>/meta.json        format version, descriptor name, dimension (checked on every open), and
                             for `pairnet` its checkpoint's path and SHA-256
    <index>/panels.sqlite    panels (id, path, box, source_id, n_vectors, points: the stored keypoints'
                             positions, 2 B each, for the geometric check of `query`), files (path,
                             size, mtime, status, error) and state (which vectors file is committed)
    <index>/vectors-N.faiss  the FAISS index of the committed panels
    <index>/codebook.npy     the descriptor's own data, when it has some (pooled_sift)
    <index>/build.lock       held (flock) by the one build writing the index

A build adds panels in memory and commits every few hundred: the FAISS index is written to a new
file, then one SQLite transaction records the new panels, their files and the new file's name. A
build killed at any point leaves the last commit intact; rerun, it skips the committed files.

Index type by size (vectors; a panel has up to 64 with `local_sift`, 10 with the regional ones):
`flat` (exact, `IDMap2,Flat`) up to `FLAT_MAX`; `ivf` (`IVF<nlist>,SQ8`, 8-bit scalar codes) up to
`IVF_MAX`; above, `ivf_pq` (`IVF<nlist>,PQ<dim / 4>`); nlist about sqrt(n), `nprobe` 8. The
inverted lists are trained on the vectors at hand when the flat index outgrows its limit.
`on_search_device` moves an index to the GPUs for searching (faiss-gpu), when asked and present.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from collection.descriptors import SLOTS

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: keypoint positions in the panel table (format 1 had none)
FLAT_MAX = 20_000  # vectors (about 300 panels of local_sift): exact search is cheap up to here
IVF_MAX = 2_000_000  # vectors (about 30,000 panels): 8-bit scalar codes; above, product quantization
TRAIN_PER_LIST = 40  # training vectors per inverted list (FAISS warns below 39)
# inverted lists scanned per query vector: the scan is most of a query's time, and on a kept
# 100,100-panel collection 8 lists found every copy 32 did (4.0 times less scanned)
NPROBE = 8
ADD_BATCH = 65_536  # vectors handed to FAISS at once: one add per panel costs more in OpenMP's waits than in work
INDEX_TYPES = ("auto", "flat", "ivf", "ivf_pq")
GPU_CHOICES = ("auto", "true", "false")


class IndexRefused(ValueError):
    """The directory holds an index this toolkit version or this descriptor cannot use."""


class IndexBusy(RuntimeError):
    """Another build holds the index's lock."""


def faiss_module() -> Any:
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # not its CPU-feature probing, which reads as errors
    try:
        import faiss
    except ImportError:
        raise IndexRefused("collection search needs FAISS: pip install faiss-cpu (extra `index`)") from None
    return faiss


def on_search_device(index: Any, gpu: str | bool = "auto") -> tuple[Any, bool]:
    """(index to search, on GPU): `gpu=auto` moves it to every GPU FAISS sees (a faiss-gpu build)
    and keeps it on the CPU when there is none; `true` requires one; `false` stays on the CPU."""
    choice = str(gpu).lower()
    if choice not in GPU_CHOICES:
        raise ValueError(f"index_gpu must be one of {', '.join(GPU_CHOICES)}, got {gpu!r}")
    faiss = faiss_module()
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if choice == "false" or (choice == "auto" and gpus == 0) or index is None:
        return index, False
    if gpus == 0:
        raise IndexRefused(
            "index_gpu=true but FAISS sees no GPU: install faiss-gpu on a machine with a CUDA GPU, "
            "or search on the CPU with index_gpu=auto or false"
        )
    try:
        moved = faiss.index_cpu_to_all_gpus(index)
    except RuntimeError as error:
        if choice == "true":
            raise IndexRefused(f"FAISS could not move this index to the GPU: {error}") from None
        log.warning("searching on the CPU: FAISS could not move this index to the GPU (%s)", error)
        return index, False
    if hasattr(index, "nprobe"):
        faiss.GpuParameterSpace().set_index_parameter(moved, "nprobe", index.nprobe)
    return moved, True


def atomic_write_text(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def n_lists(n_vectors: int) -> int:
    """About sqrt(n) inverted lists, a power of two in [64, 65536]."""
    return int(2 ** round(math.log2(max(64.0, min(65536.0, math.sqrt(max(n_vectors, 1)))))))


def factory_string(index_type: str, dim: int, n_vectors: int) -> str:
    if index_type == "flat":
        return "IDMap2,Flat"
    if index_type == "ivf":
        return f"IVF{n_lists(n_vectors)},SQ8"
    nlist = n_lists(n_vectors)
    return f"IVF{nlist},PQ{max(1, dim // 4)}"


def choose_type(requested: str, n_vectors: int) -> str:
    if requested not in INDEX_TYPES:
        raise ValueError(f"index_type must be one of {', '.join(INDEX_TYPES)}, got {requested!r}")
    if requested != "auto":
        return requested
    return "flat" if n_vectors <= FLAT_MAX else "ivf" if n_vectors <= IVF_MAX else "ivf_pq"


def read_meta(path: Path) -> dict[str, Any]:
    """An index's meta.json, refused by name when it is not the object the toolkit writes."""
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise IndexRefused(f"{path} is damaged ({error}); rebuild the index into a new folder") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("descriptor"), str):
        raise IndexRefused(f"{path} is not an index's meta.json (no descriptor named); rebuild the index")
    return meta


class PanelStore:
    """One index directory opened for reading or, under its lock, for a build."""

    def __init__(self, directory: str | os.PathLike, descriptor: Any, create: bool = False) -> None:
        self.directory = Path(directory)
        self.descriptor = descriptor
        meta_path = self.directory / "meta.json"
        if not meta_path.is_file():
            if not create:
                raise IndexRefused(f"{self.directory} holds no index (no meta.json): build it with index.py first")
            self.directory.mkdir(parents=True, exist_ok=True)
            meta = {"format_version": FORMAT_VERSION, "descriptor": descriptor.name, "dim": descriptor.dim}
            meta.update(getattr(descriptor, "stored_meta", {}))  # what finds the descriptor again (pairnet's file)
            atomic_write_text(meta_path, json.dumps(meta, indent=1))
        self.meta = self.check_meta(read_meta(meta_path))
        database = self.directory / "panels.sqlite"
        if not create and not database.is_file():  # read as empty, and an empty one written into it, before
            raise IndexRefused(f"{database} is missing: the index is incomplete; rebuild it into a new folder")
        try:
            self.db = sqlite3.connect(database, timeout=60)
            self.db.executescript(
                "CREATE TABLE IF NOT EXISTS panels (id INTEGER PRIMARY KEY, path TEXT, box TEXT, source_id TEXT,"
                " n_vectors INTEGER, points BLOB);"
                "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, mtime REAL, status TEXT,"
                " error TEXT, panels INTEGER);"
                "CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT);"
            )
            self.index = self.load_index()
        except sqlite3.DatabaseError as error:
            raise IndexRefused(f"{database} is damaged ({error}); rebuild the index into a new folder") from None
        self.pending: list[tuple[int, str, str, str, int, bytes]] = []
        self.pending_files: list[tuple[str, int, float, str, str, int]] = []
        self.forgotten: list[int] = []
        self.forgotten_files: list[str] = []  # files gone from their folder, forgotten at the next commit
        self.waiting: list[tuple[np.ndarray, np.ndarray]] = []  # (vectors, ids) not yet in the FAISS index
        self.waiting_vectors = 0
        self.expected_vectors = 0  # set by a build: how large the index is about to grow
        self.next_id = (self.db.execute("SELECT MAX(id) FROM panels").fetchone()[0] or -1) + 1
        self._lock: Any = None
        self.on_gpu = False  # set by `on_search_device` when querying

    def check_meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        if meta.get("format_version") != FORMAT_VERSION:
            raise IndexRefused(
                f"{self.directory} was built with index format {meta.get('format_version')}, this toolkit reads "
                f"format {FORMAT_VERSION}: rebuild it with index.py into a new folder"
            )
        stored = str(meta.get("descriptor"))
        if stored != self.descriptor.name and stored.split("-")[0] == self.descriptor.name.split("-")[0]:
            raise IndexRefused(
                f"{self.directory} holds {stored} descriptors, not {self.descriptor.name}: the same descriptor with "
                "other settings or weights (another descriptor_checkpoint); use the one the index was built with, "
                "or build another index"
            )
        if stored != self.descriptor.name:
            raise IndexRefused(
                f"{self.directory} holds {meta.get('descriptor')} descriptors, not {self.descriptor.name}: "
                f"use it with descriptor={str(meta.get('descriptor')).split('-')[0]}, or build another index"
            )
        return meta

    # --- the lock -------------------------------------------------------------------------------
    def lock(self) -> "PanelStore":
        """Take the build lock (released when the process ends, however it ends)."""
        handle = open(self.directory / "build.lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise IndexBusy(f"{self.directory} is being written by {holder}; wait for that build to end") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._lock = handle
        return self

    def unlock(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    # --- reading --------------------------------------------------------------------------------
    def state(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def load_index(self) -> Any:
        name = self.state("vectors_file")
        if name is None:
            return None
        path = self.directory / name
        if not path.is_file():
            raise IndexRefused(f"{path} is missing: the index is incomplete; rebuild it into a new folder")
        try:
            index = faiss_module().read_index(str(path))
        except RuntimeError as error:  # a truncated or foreign file: FAISS says why in many lines
            reason = str(error).strip().splitlines()[-1]
            raise IndexRefused(f"{path} is damaged ({reason}); rebuild the index into a new folder") from None
        if hasattr(index, "nprobe"):
            index.nprobe = NPROBE  # also for indexes written when the default was another
        return index

    def indexed_stamp(self, path: str) -> tuple[int, float] | None:
        """(size, mtime) of `path` when it was indexed; None for a file the index does not hold."""
        row = self.db.execute("SELECT size, mtime FROM files WHERE path = ?", (path,)).fetchone()
        return None if row is None else (int(row[0]), float(row[1]))

    def known_files(self) -> dict[str, tuple[int, float, str]]:
        return {p: (s, m, st) for p, s, m, st in self.db.execute("SELECT path, size, mtime, status FROM files")}

    def panels(self, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        ids = list(ids)
        rows: dict[int, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for pid, path, box, source, points in self.db.execute(
                f"SELECT id, path, box, source_id, points FROM panels WHERE id IN ({marks})", chunk
            ):
                rows[pid] = {"id": pid, "path": path, "box": json.loads(box), "source_id": source, "points": points}
        return rows

    @property
    def n_panels(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM panels").fetchone()[0])

    @property
    def index_type(self) -> str:
        return getattr(self, "_new_type", None) or self.state("index_type", "none") or "none"

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(similarities, panel ids, rows within the panel) of each vector's k nearest; -1 where fewer exist."""
        if self.index is None or self.index.ntotal == 0:
            empty = np.full((len(vectors), k), -1, np.int64)
            return np.zeros((len(vectors), k), np.float32), empty, empty
        sims, ids = self.index.search(np.ascontiguousarray(vectors, np.float32), k)
        return sims, np.where(ids >= 0, ids // SLOTS, -1), np.where(ids >= 0, ids % SLOTS, -1)

    # --- writing (under the lock) ---------------------------------------------------------------
    def add_panel(
        self, path: str, box: tuple[int, int, int, int], source_id: str, vectors: np.ndarray, points: bytes = b""
    ) -> int:
        """A panel's vectors (ids panel id * SLOTS + row) and, when the descriptor has them, their positions."""
        panel_id = self.next_id
        self.next_id += 1
        vectors = np.asarray(vectors, np.float32)[:SLOTS]
        self.pending.append((panel_id, path, json.dumps(list(box)), source_id, len(vectors), points))
        if len(vectors):
            self.waiting.append((vectors, panel_id * SLOTS + np.arange(len(vectors), dtype=np.int64)))
            self.waiting_vectors += len(vectors)
            if self.waiting_vectors >= ADD_BATCH:
                self.add_waiting()
        return panel_id

    def add_waiting(self) -> None:
        """Hand the panels' vectors gathered since the last call to FAISS in one add."""
        if self.waiting:
            vectors, ids = (np.concatenate(parts) for parts in zip(*self.waiting))
            self.waiting, self.waiting_vectors = [], 0
            self.add_vectors(vectors, ids)

    def set_sources(self, items: list[tuple[str, str]]) -> int:
        """Give the panels of files already indexed the source id the input gives them now (a folder
        indexed again from a manifest with `review` ids); the number of files whose id changed."""
        changed = 0
        with self.db:
            for path, source_id in items:
                update = "UPDATE panels SET source_id = ? WHERE path = ? AND source_id IS NOT ?"
                changed += self.db.execute(update, (source_id, path, source_id)).rowcount > 0
        return changed

    def forget(self, path: str, removed: bool = False) -> None:
        """Drop a changed file's panels (and, `removed`, the file itself): vectors now, rows at the
        next commit."""
        self.add_waiting()
        if removed:
            self.forgotten_files.append(path)
        ids = [pid for (pid,) in self.db.execute("SELECT id FROM panels WHERE path = ?", (path,))]
        if ids and self.index is not None:
            vector_ids = np.concatenate([pid * SLOTS + np.arange(SLOTS, dtype=np.int64) for pid in ids])
            self.index.remove_ids(faiss_module().IDSelectorBatch(vector_ids))
        self.forgotten.extend(ids)

    def add_file(self, path: str, size: int, mtime: float, status: str, error: str, panels: int) -> None:
        self.pending_files.append((path, size, mtime, status, error, panels))

    def add_vectors(self, vectors: np.ndarray, ids: np.ndarray, requested: str | None = None) -> None:
        """Add, as flat until enough vectors are at hand to train the index type the expected size needs."""
        requested = requested or self.state("requested_type", "auto") or "auto"
        if self.index is None:
            self.index = faiss_module().IndexIDMap2(faiss_module().IndexFlatIP(self.descriptor.dim))
            self._new_type = "flat"
        if len(vectors):
            self.index.add_with_ids(np.ascontiguousarray(vectors, np.float32), ids)
        expected = max(self.index.ntotal, self.expected_vectors)
        wanted = choose_type(requested, expected)
        if self.index_type == "flat" and wanted != "flat":
            if self.index.ntotal >= min(expected, TRAIN_PER_LIST * n_lists(expected)):
                empty = (np.zeros((0, self.descriptor.dim), np.float32), np.zeros(0, np.int64))
                self.rebuild(wanted, expected, extra=empty)

    def rebuild(self, index_type: str, n_vectors: int, extra: tuple[np.ndarray, np.ndarray]) -> None:
        """A new index of `index_type` holding the flat index's vectors (if any) and `extra`."""
        faiss = faiss_module()
        vectors, ids = extra
        if self.index is not None and self.index.ntotal:
            old = self.index.index.reconstruct_n(0, self.index.ntotal)
            vectors = np.concatenate([old, vectors])
            ids = np.concatenate([faiss.vector_to_array(self.index.id_map).astype(np.int64), ids])
        if index_type == "flat":
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.descriptor.dim))
        else:
            spec = factory_string(index_type, self.descriptor.dim, n_vectors)
            index = faiss.index_factory(self.descriptor.dim, spec, faiss.METRIC_INNER_PRODUCT)
            faiss.extract_index_ivf(index).cp.niter = 10
            sample = np.random.default_rng(0).permutation(len(vectors))[: TRAIN_PER_LIST * n_lists(n_vectors)]
            index.train(np.ascontiguousarray(vectors[sample]))
            index.nprobe = NPROBE
        index.add_with_ids(np.ascontiguousarray(vectors, np.float32), ids)
        self.index = index
        self._new_type = index_type

    def commit(self) -> None:
        """Write the vectors to a new file, then switch to it and record the panels in one transaction."""
        self.add_waiting()
        if not self.pending and not self.pending_files and not self.forgotten and not self.forgotten_files:
            return
        faiss = faiss_module()
        old = self.state("vectors_file")
        generation = int(self.state("generation", "0") or 0) + 1
        name = f"vectors-{generation}.faiss"
        if self.index is not None:
            temporary = self.directory / (name + ".tmp")
            faiss.write_index(self.index, str(temporary))
            os.replace(temporary, self.directory / name)
        with self.db:
            self.db.executemany("DELETE FROM panels WHERE id = ?", [(pid,) for pid in self.forgotten])
            self.db.executemany("INSERT INTO panels VALUES (?, ?, ?, ?, ?, ?)", self.pending)
            self.db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?)", self.pending_files)
            self.db.executemany("DELETE FROM files WHERE path = ?", [(path,) for path in self.forgotten_files])
            if self.index is not None:
                values = {"vectors_file": name, "generation": str(generation)}
                values["index_type"] = getattr(self, "_new_type", self.index_type)
                self.db.executemany("INSERT OR REPLACE INTO state VALUES (?, ?)", list(values.items()))
        if old and old != name and self.index is not None:
            (self.directory / old).unlink(missing_ok=True)
        self.pending, self.pending_files, self.forgotten, self.forgotten_files = [], [], [], []

    def close(self) -> None:
        self.db.close()
        self.unlock()
