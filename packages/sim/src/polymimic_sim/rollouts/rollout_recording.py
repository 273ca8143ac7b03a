"""Rollouts in rerun: one recording per evaluation (`evaluate --rerun`, `sim.rerun=true`).

Each episode is `episodes/<task>/seed<N>/` on its own `tick` and `time` timelines (from 0):

- `images/<camera>`: what the policy saw at each tick (JPEG-encoded once, sent as encoded
  images);
- `state/<i>`, `actions/<i>`: the observed state and the executed action, as series;
- `chunks/<i>`: each chunk the policy predicted, at the tick it was asked, as the future it
  proposed for action channel i (a line over ticks tick..tick+H-1), so a switch to a new
  chunk shows as the proposed line jumping; `chunks/asked` a text line per request;
- `reward` as a series, and the outcome (success, strict success, ticks, error) as text at
  the last tick.

Needs rerun-sdk (`polymimic-sim[viz]`). A chunk is captured by wrapping the policy the
executor asks (`ChunkTap`), so every executor (chunk, temporal ensemble, RTC) is recorded
the same way, in one process or with the policy batched across simulator processes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from polymimic_data.episodes import RecordingFile, log_chunk, require_rerun
from polymimic_sim.rollouts.episodes import Outcome

APPLICATION = "polymimic_sim_rollouts"


class EpisodeRecording:
    """One episode's entities in a RolloutRecorder's stream; ticks counted by `act`."""

    def __init__(self, recorder: RolloutRecorder, task: str, seed: int) -> None:
        self.rr, self.rec = recorder.rr, recorder.rec
        self.fps = recorder.fps
        self.root = f"episodes/{task}/seed{seed}"
        self.tick = 0
        # series are kept per episode and sent as columns at its end (one message per
        # channel, not one per channel per tick): entity -> (ticks, rows, one channel per entity)
        self.series: dict[str, tuple[list[int], list[np.ndarray], bool]] = {}

    def _at(self, tick: int) -> None:
        self.rec.set_time("tick", sequence=tick)
        self.rec.set_time("time", duration=tick / self.fps if self.fps else 0.0)

    def _series(self, entity: str, values: Any, *, channels: bool = True) -> None:
        ticks, rows, _ = self.series.setdefault(entity, ([], [], channels))
        ticks.append(self.tick)
        rows.append(np.asarray(values, dtype=np.float64).reshape(-1))

    def _send_series(self) -> None:
        """Every buffered series, one column per channel (`<entity>/<i>`, or the entity)."""
        rr = self.rr
        for entity, (ticks, rows, channels) in self.series.items():
            at = np.asarray(ticks, dtype=np.int64)
            seconds = at / self.fps if self.fps else np.zeros(len(at))
            indexes = [rr.TimeColumn("tick", sequence=at), rr.TimeColumn("time", duration=seconds)]
            values = np.stack(rows)
            for i in range(values.shape[1]):
                path = f"{self.root}/{entity}/{i}" if channels else f"{self.root}/{entity}"
                self.rec.send_columns(path, indexes=indexes,
                                      columns=rr.Scalars.columns(scalars=values[:, i]))  # fmt: skip
        self.series.clear()

    def observe(self, observation: Mapping[str, Any]) -> None:
        """The observation the policy gets at this tick: every camera, and the state."""
        import simplejpeg

        self._at(self.tick)
        for camera, image in sorted(observation.get("images", {}).items()):
            jpeg = simplejpeg.encode_jpeg(np.ascontiguousarray(image), quality=90)
            self.rec.log(f"{self.root}/images/{camera}",
                         self.rr.EncodedImage(contents=jpeg, media_type="image/jpeg"))  # fmt: skip
        if observation.get("state") is not None:
            self._series("state", observation["state"])

    def chunk(self, actions: np.ndarray) -> None:
        """A chunk the policy predicted now: per channel, the future it proposed."""
        self._at(self.tick)
        log_chunk(self.rec, f"{self.root}/chunks", self.tick, actions)
        steps = int(np.prod(np.shape(actions)[:-1]))
        self.rec.log(f"{self.root}/chunks/asked",
                     self.rr.TextLog(f"chunk of {steps} at tick {self.tick}"))  # fmt: skip

    def act(self, action: np.ndarray | None, reward: float) -> None:
        """The action executed at this tick and the reward it earned; the next tick."""
        self._at(self.tick)
        if action is not None:
            self._series("actions", action)
        self._series("reward", [reward], channels=False)
        self.tick += 1

    def end(self, outcome: Outcome) -> None:
        """The series of the whole episode, and the outcome at its last tick."""
        self._send_series()
        self._at(max(self.tick - 1, 0))
        text = (
            f"{'success' if outcome.success else 'failure'} (strict: {outcome.strict_success}) "
            f"after {outcome.steps} ticks" + (f"; {outcome.error}" if outcome.error else "")
        )
        level = self.rr.TextLogLevel.INFO if outcome.success else self.rr.TextLogLevel.WARN
        self.rec.log(f"{self.root}/outcome", self.rr.TextLog(text, level=level))
        self.rec.reset_time()


class RolloutRecorder:
    """One rerun recording of an evaluation at `dest` (.rrd).

    Written beside it and renamed into place by `close`, so an interrupted evaluation leaves
    no half a file.
    """

    def __init__(self, dest: str | Path, *, fps: float = 50.0) -> None:
        self.rr = require_rerun("rollout recordings (evaluate --rerun)", "polymimic-sim[viz]")
        self.file = RecordingFile(dest, APPLICATION, f"rollouts-{time.time_ns()}", self.rr)
        self.dest, self.rec = self.file.dest, self.file.rec
        self.fps = fps

    def episode(self, task: str, seed: int, fps: float | None = None) -> EpisodeRecording:
        """A new episode's recording (`fps`: the task's, for the time timeline)."""
        if fps:
            self.fps = fps
        return EpisodeRecording(self, task, seed)

    def close(self) -> Path:
        """Flush and move the recording into place."""
        return self.file.close()

    def abort(self) -> None:
        """Drop the recording of an evaluation that failed: nothing at `dest`."""
        self.file.abort()


class ChunkTap:
    """A policy (openpi's client interface) whose predicted chunks go to `recording`."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.recording: EpisodeRecording | None = None

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        result = self.policy.infer(observation)
        if self.recording is not None:
            self.recording.chunk(result["actions"])
        return result

    def get_server_metadata(self) -> dict[str, Any]:
        return self.policy.get_server_metadata()

    def reset(self) -> None:
        self.policy.reset()

    def __getattr__(self, name: str) -> Any:  # e.g. a batched slot's begin_episode
        return getattr(self.policy, name)
