"""Per loader worker: episodes opened once, their numeric arrays read whole and checked."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polymimic_data.episodes.bad_values import frame_faults
from polymimic_data.episodes.resolver import EpisodeInfo
from polymimic_data.samples.faults import DataFault, SampleFault
from polymimic_data.store.episode_store import EpisodeReader


@dataclass
class LoadedEpisode:
    """One cached episode: its reader, numeric arrays, annotations and bad frames."""

    reader: EpisodeReader
    arrays: dict[str, np.ndarray]
    annotations: list[dict[str, Any]]
    bad: dict[str, tuple[np.ndarray, list[str]]]  # key -> (bad per frame, reason per frame)
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

    def get(self, episode: int) -> LoadedEpisode:
        entry = self._entries.get(episode)
        if entry is not None:
            self._entries.move_to_end(episode)
            return entry
        info = self._episodes[episode]
        self.opened += 1
        key = "*"
        try:
            reader = EpisodeReader(info.path)
            arrays, bad = {}, {}
            for key in self._keys:
                arrays[key] = reader.read_numeric(key)
                if len(arrays[key]) < reader.total_frames:
                    raise ValueError(
                        f"{len(arrays[key])} frames, total_frames is {reader.total_frames}"
                    )
                mask, reasons = frame_faults(key, arrays[key])
                if mask.any():
                    bad[key] = (mask, reasons)
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
