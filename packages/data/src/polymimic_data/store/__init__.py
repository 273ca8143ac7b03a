"""The episode store: zarr episodes read and written, atomic files, remote roots.

Imports nothing from samples, episodes, lerobot or synthetic (the import-rule test holds it).
"""

from __future__ import annotations

from polymimic_data.store.atomic_files import (
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from polymimic_data.store.episode_attrs import attrs_match, read_group_attrs
from polymimic_data.store.episode_store import (
    EPISODE_SUFFIX,
    FRAMES_PER_SHARD,
    INCOMPLETE_PREFIX,
    NUMERIC_CHUNK_FRAMES,
    EpisodeReader,
    EpisodeWriter,
    episode_hash,
    write_episode,
)
from polymimic_data.store.numeric_reader import read_rows
from polymimic_data.store.remote_episodes import sync_remote_episodes
from polymimic_data.store.vlen_bytes_reader import VlenBytesArrayReader
from polymimic_data.store.zarr_chunks import (
    MISSING,
    ChunkFileError,
    ChunkLayout,
    chunk_key,
    decode_bytes,
    file_size,
    pread,
    read_layout,
    shard_index,
    strip_crc32c,
)

__all__ = [
    "EPISODE_SUFFIX",
    "FRAMES_PER_SHARD",
    "INCOMPLETE_PREFIX",
    "MISSING",
    "NUMERIC_CHUNK_FRAMES",
    "ChunkFileError",
    "ChunkLayout",
    "EpisodeReader",
    "EpisodeWriter",
    "VlenBytesArrayReader",
    "attrs_match",
    "chunk_key",
    "decode_bytes",
    "episode_hash",
    "file_size",
    "pread",
    "read_group_attrs",
    "read_layout",
    "read_rows",
    "shard_index",
    "strip_crc32c",
    "sync_remote_episodes",
    "write_bytes_atomic",
    "write_episode",
    "write_json_atomic",
    "write_text_atomic",
]
