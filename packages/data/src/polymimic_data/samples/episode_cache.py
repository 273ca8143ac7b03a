"""Per loader worker: episodes opened once, their numeric arrays read whole and checked.

With a numeric pack (numeric_pack), an open takes the arrays, bad frames, annotations and
the cameras' shard indices from it where the disk still holds what was packed (and reads
no file), and reads them otherwise.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polymimic_data.episodes.resolver import EpisodeInfo
from polymimic_data.samples.faults import DataFault, SampleFault
from polymimic_data.samples.numeric_pack import BadFrames, NumericPack, read_key
from polymimic_data.store.episode_store import EpisodeReader


@dataclass
class LoadedEpisode:
    """One cached episode: its reader, numeric arrays, annotations and bad frames."""

    reader: EpisodeReader
    arrays: dict[str, np.ndarray]
    annotations: list[dict[str, Any]]
    bad: BadFrames  # key -> (bad per frame, reason per frame)
    fixed_reference: np.ndarray | None  # a layout frame that does not move (camera extrinsics)
    # Built by the dataset on first use: per vector ("state", "actions"), its rows at every
    # frame a window can read, where assembling a vector only copies rows (windows.copies_rows).
    row_tables: dict[str, np.ndarray] = field(default_factory=dict)


class EpisodeCache:
    """Per worker: readers opened once, numeric arrays read whole and checked, bounded LRU."""

    def __init__(
        self,
        episodes: Sequence[EpisodeInfo],
        keys: Sequence[str],
        fixed_reference: Callable[[EpisodeInfo], np.ndarray | None],
        capacity: int,
    ) -> None:
        self._episodes = episodes
        self._keys = tuple(keys)
        self._fixed_reference = fixed_reference
        self._capacity = capacity
        self._entries: OrderedDict[int, LoadedEpisode] = OrderedDict()
        self.opened = 0  # episodes opened (read and checked) so far, re-openings included
        self.pack: NumericPack | None = None  # set by EpisodeDataset.use_numeric_pack
        self.from_pack = 0  # of the opens, those the pack served

    def get(self, episode: int) -> LoadedEpisode:
        entry = self._entries.get(episode)
        if entry is not None:
            self._entries.move_to_end(episode)
            return entry
        info = self._episodes[episode]
        self.opened += 1
        key = "*"
        try:
            packed = self.pack.get(episode) if self.pack is not None else None
            if packed is not None:
                self.from_pack += 1
                reader, arrays = packed.reader, packed.arrays
                bad, annotations = packed.bad, packed.annotations
            else:
                reader = EpisodeReader(info.path, keep_files_open=True)
                arrays, bad = {}, {}
                for key in self._keys:  # one at a time: a fault names its key
                    arrays[key], faults = read_key(reader, key)
                    if faults is not None:
                        bad[key] = faults
                key = "annotations"
                annotations = reader.read_annotations()
            key = "camera_extrinsics"
            reference = self._fixed_reference(info)
            entry = LoadedEpisode(reader, arrays, annotations, bad, reference)
        except Exception as exc:
            fault = DataFault(info.hash, key, -1, f"episode unreadable: {exc}")
            raise SampleFault(fault, whole_episode=True) from exc
        self._entries[episode] = entry
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return entry
