"""Running a trained policy on checked observations: batches, noise and timing.

`PolicyRunner` is the one place the model runs (the server calls it from one thread);
`LocalPolicy` is the same policy in-process with openpi's client interface (`infer`,
`reset`, `get_server_metadata`), so a control loop or a chunk executor drives a policy in
the same process or over the wire alike.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from polymimic_serve.observations import ObservationReader, Request, StateHistory, stack
from polymimic_serve.trained_policy import NonFiniteActions, TrainedPolicy

Result = np.ndarray | NonFiniteActions  # one request's chunk, or why it has none


class PolicyRunner:
    """Samples chunks for batches of Requests; its noise comes from one seeded generator."""

    def __init__(self, policy: TrainedPolicy, seed: int = 0) -> None:
        self.policy = policy
        self.generator = torch.Generator().manual_seed(seed)

    def run(
        self,
        requests: Sequence[Request],
        generators: Sequence[torch.Generator] | None = None,
    ) -> tuple[list[Result], float]:
        """One chunk (T, A) float32 per request, and the milliseconds the batch took.

        A request whose chunk is not finite gets a NonFiniteActions instead (the others in
        its batch are answered). `generators`: one per request, to draw its noise from
        instead of the runner's own (a caller that wants each stream's chunks independent
        of how requests are batched).
        """
        start = time.perf_counter()
        batch, continuations = stack(list(requests))
        shape = (self.policy.horizon, self.policy.layout.dim)
        if generators is None:
            noise = torch.randn((len(requests), *shape), generator=self.generator)
        elif len(generators) != len(requests):
            raise ValueError(
                f"generators: one per request ({len(requests)}), got {len(generators)}"
            )
        else:
            noise = torch.stack([torch.randn(shape, generator=g) for g in generators])
        try:
            chunks: list[Result] = list(
                self.policy.predict_batch(batch, noise=noise, continuations=continuations)[
                    "actions"
                ]
            )
        except NonFiniteActions as bad:
            chunks = [
                chunk if good else NonFiniteActions(chunk[None], np.zeros(1, bool))
                for chunk, good in zip(bad.actions, bad.finite, strict=True)
            ]
        return chunks, (time.perf_counter() - start) * 1e3


class LocalPolicy:
    """A trained policy in this process, spoken to as openpi's clients speak to a server."""

    def __init__(
        self,
        policy: TrainedPolicy,
        camera_map: Mapping[str, str] | None = None,
        *,
        state_key: str = "state",
        seed: int = 0,
    ) -> None:
        self.reader = ObservationReader(policy, dict(camera_map or {}), state_key)
        self.runner = PolicyRunner(policy, seed)
        self.history = StateHistory(policy.history)

    def get_server_metadata(self) -> dict[str, Any]:
        """What the server would send on connect."""
        return self.reader.metadata()

    def infer(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        """`{"actions": float32 (T, A), "policy_timing": {"infer_ms": ...}}` for one observation.

        Raises ObservationError (a ValueError) naming the key of a bad observation, and
        NonFiniteActions (a ValueError) when the policy's chunk is not finite; either way the
        state history is as it was before this observation.
        """
        request = self.reader.read(observation, self.history)
        try:
            (actions,), infer_ms = self.runner.run([request])
        except BaseException:
            self.history.undo(request)
            raise
        if isinstance(actions, NonFiniteActions):
            self.history.undo(request)
            raise actions
        return {"actions": actions, "policy_timing": {"infer_ms": infer_ms}}

    def reset(self) -> None:
        """A new episode: the state history starts again."""
        self.history.reset()
