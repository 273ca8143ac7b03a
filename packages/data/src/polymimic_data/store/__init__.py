"""The episode store: zarr episodes read and written, atomic files, remote roots.

Imports nothing from samples, episodes, lerobot or synthetic (the import-rule test holds it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from polymimic_data.store.atomic_files import (
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from polymimic_data.store.episode_attrs import attrs_match, read_group_attrs

# Loaded on first use: these import zarr, which a light user (run directories, atomic
# writes, `train --help`) should not pay for.
_LAZY = {  # name -> its module in polymimic_data.store
    "EPISODE_SUFFIX": "episode_store",
    "FRAMES_PER_SHARD": "episode_store",
    "INCOMPLETE_PREFIX": "episode_store",
    "NUMERIC_CHUNK_FRAMES": "episode_store",
    "EpisodeReader": "episode_store",
    "EpisodeWriter": "episode_store",
    "episode_hash": "episode_store",
    "write_episode": "episode_store",
    "read_rows": "numeric_reader",
    "RemoteRootError": "remote_episodes",
    "is_remote_root": "remote_episodes",
    "mirror_folder_name": "remote_episodes",
    "sync_remote_episodes": "remote_episodes",
    "VlenBytesArrayReader": "vlen_bytes_reader",
    "MISSING": "zarr_chunks",
    "ChunkFileError": "zarr_chunks",
    "ChunkLayout": "zarr_chunks",
    "chunk_key": "zarr_chunks",
    "decode_bytes": "zarr_chunks",
    "file_size": "zarr_chunks",
    "pread": "zarr_chunks",
    "read_layout": "zarr_chunks",
    "shard_index": "zarr_chunks",
    "strip_crc32c": "zarr_chunks",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"polymimic_data.store.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'polymimic_data.store' has no attribute {name!r}")


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
    "RemoteRootError",
    "VlenBytesArrayReader",
    "attrs_match",
    "chunk_key",
    "decode_bytes",
    "episode_hash",
    "file_size",
    "is_remote_root",
    "mirror_folder_name",
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


if TYPE_CHECKING:
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
    from polymimic_data.store.remote_episodes import (
        RemoteRootError,
        is_remote_root,
        mirror_folder_name,
        sync_remote_episodes,
    )
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
