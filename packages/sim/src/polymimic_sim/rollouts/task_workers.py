"""Simulated tasks in worker processes: `TaskWorkers(name, count)`, each a process of its own.

A worker makes its task and answers reset, step and close over a pipe. A malformed action
comes back as the ValueError it raised; a simulator that gives up comes back as
("crashed", why), the episode's failure. Workers are spawned, never forked: the parent
holds torch's threads, and a GL context must be made in the process that renders. This
module imports neither torch nor a simulator, so a worker starts in about a second.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from polymimic_sim.tasks.rendering import ensure_headless_rendering


def _serve_task(conn: Connection, name: str, image_size: Sequence[int], cameras: list[str]) -> None:
    """A worker: make the task, then answer reset / step / close until told to stop."""
    from polymimic_sim.tasks.registry import make_task
    from polymimic_sim.tasks.rendering import never_loads_torch

    never_loads_torch()
    try:
        task = make_task(name, image_size=image_size, cameras=cameras)
    except Exception as exc:  # the parent raises it (a missing extra, a bad name)
        conn.send(("error", exc))
        return
    conn.send(("ready", {"fps": task.fps, "max_steps": task.max_steps,
                         "registered_steps": task.registered_steps}))  # fmt: skip
    try:
        while True:
            command, argument = conn.recv()
            if command == "close":
                break
            try:
                reply = task.reset(argument) if command == "reset" else task.step(argument)
                conn.send(("ok", reply))
            except ValueError as exc:  # a malformed action: the caller's bug
                conn.send(("error", exc))
            except Exception as exc:  # the simulator gave up: the episode's failure
                conn.send(("crashed", f"{type(exc).__name__}: {exc}"))
    finally:
        task.close()


class TaskWorkers:
    """`count` copies of one task, each in a process of its own."""

    def __init__(
        self, name: str, count: int, *, image_size: Sequence[int], cameras: Sequence[str]
    ) -> None:
        ensure_headless_rendering()  # probed once here; the workers inherit MUJOCO_GL
        context = mp.get_context("spawn")
        self.conns: list[Connection] = []
        self.processes: list[Any] = []
        for _ in range(count):
            parent, child = context.Pipe()
            process = context.Process(
                target=_serve_task,
                args=(child, name, tuple(image_size), list(cameras)),
                daemon=True,
            )
            process.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(process)
        try:
            infos = [self._receive(i) for i in range(count)]
        except BaseException:
            self.close()
            raise
        self.fps, self.max_steps = float(infos[0]["fps"]), int(infos[0]["max_steps"])
        self.registered_steps = int(infos[0]["registered_steps"])

    def _receive(self, slot: int) -> Any:
        try:
            kind, value = self.conns[slot].recv()
        except EOFError as exc:
            code = self.processes[slot].exitcode
            raise RuntimeError(f"simulator worker {slot} died (exit code {code})") from exc
        if kind == "error":
            raise value
        return ("crashed", value) if kind == "crashed" else value

    def reset(self, slot: int, seed: int) -> dict[str, Any]:
        """The first observation of the episode from `seed`, in `slot`."""
        self.conns[slot].send(("reset", seed))
        return self._receive(slot)

    def step(self, actions: Mapping[int, np.ndarray]) -> dict[int, Any]:
        """Every slot steps at once: its Step, or ("crashed", why)."""
        for slot, action in actions.items():
            self.conns[slot].send(("step", action))
        return {slot: self._receive(slot) for slot in actions}

    def close(self) -> None:
        """Stop every worker (and wait for it)."""
        for conn in self.conns:
            with contextlib.suppress(BrokenPipeError, OSError):  # a worker already gone
                conn.send(("close", None))
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        for conn in self.conns:
            conn.close()

    def __enter__(self) -> TaskWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
