"""Search across a collection: index every panel once, then ask about any new image.

`descriptors` (what a panel is reduced to), `panels` (cutting figures at white gutters), `store`
(the index directory: FAISS vectors, SQLite panel table, lock), `build` (incremental, resumable,
sharded builds), `query` (retrieve, then verify with the pair detector). Entry points: `index.py`
builds, `infer.py ... index=DIR` searches. docs/collection_index.md has the commands and figures.
"""
