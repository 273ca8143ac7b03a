"""The policy server: openpi's websocket protocol, so openpi's robot runtimes drive it unchanged.

On connect the server sends one binary msgpack frame of metadata (a dict, see
`ObservationReader.metadata`); then each binary msgpack observation gets one binary msgpack
reply, `{"actions": float32 (T, A) in the data's units, "policy_timing": {"infer_ms"},
"server_timing": {"infer_ms", "prev_total_ms"}}`. A bad observation gets one text frame
naming the key and what was expected (openpi's client raises it as RuntimeError), and the
connection goes on. openpi's `__ctrl__` messages (episode_start, episode_end) and
`reset: true` restart the client's state history; so does a new connection.

One model serves every client: their requests queue for one inference thread, and with
`max_batch` > 1 the requests waiting together run as one batch. Inference and image
resizing run off the event loop, so keep-alive pings are answered during a slow call.
Messages have no size cap (four 480x640 cameras are 3.7 MB). `GET /healthz` answers 200.
With `api_key`, a connection without `Authorization: Api-Key <key>` gets 401 before any
model work. It binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as HTTPRequest
from websockets.http11 import Response

from polymimic_serve.inference import PolicyRunner
from polymimic_serve.observations import ObservationError, ObservationReader, Request, StateHistory
from polymimic_serve.trained_policy import TrainedPolicy
from polymimic_serve.wire import WireError, packb, unpackb

logger = logging.getLogger("polymimic_serve")

Result = tuple[np.ndarray, float]  # a chunk and the milliseconds its batch took


class Batcher:
    """Requests from every client, run one batch at a time on one inference thread."""

    def __init__(self, runner: PolicyRunner, max_batch: int = 1) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch: a positive integer, got {max_batch}")
        self.runner, self.max_batch = runner, max_batch
        self.queue: asyncio.Queue[tuple[Request, asyncio.Future[Result]]] = asyncio.Queue()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="polymimic-inference")
        self.batch_sizes: list[int] = []  # how many requests each batch held

    async def submit(self, request: Request) -> Result:
        """The chunk for `request`, once its batch has run."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((request, future))
        return await future

    async def run(self) -> None:
        """Forever: take what waits (up to max_batch), run it, hand out the chunks."""
        loop = asyncio.get_running_loop()
        while True:
            items = [await self.queue.get()]
            while len(items) < self.max_batch and not self.queue.empty():
                items.append(self.queue.get_nowait())
            items = [(r, f) for r, f in items if not f.done()]  # clients that left
            if not items:
                continue
            self.batch_sizes.append(len(items))
            try:
                chunks, ms = await loop.run_in_executor(
                    self.pool, self.runner.run, [r for r, _ in items]
                )
            except Exception as exc:  # one bad batch must not stop the server
                logger.exception("inference failed for a batch of %d", len(items))
                for _, future in items:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), chunk in zip(items, chunks, strict=True):
                if not future.done():
                    future.set_result((chunk, ms))


class PolicyServer:
    """Serves one TrainedPolicy to robot runtimes (see the module docstring)."""

    def __init__(
        self,
        policy: TrainedPolicy,
        *,
        camera_map: Mapping[str, str] | None = None,
        state_key: str = "state",
        host: str = "127.0.0.1",
        port: int = 8000,
        api_key: str | None = None,
        max_batch: int = 1,
        seed: int = 0,
    ) -> None:
        self.reader = ObservationReader(policy, dict(camera_map or {}), state_key)
        self.metadata = self.reader.metadata()
        self.runner = PolicyRunner(policy, seed)
        self.host, self.port, self.api_key, self.max_batch = host, port, api_key, max_batch
        self.batcher: Batcher | None = None

    def _process_request(
        self, connection: ServerConnection, request: HTTPRequest
    ) -> Response | None:
        if request.path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if self.api_key is not None:
            sent = request.headers.get("Authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Api-Key {self.api_key}".encode()):
                logger.warning("refused %s: no or a wrong api key", connection.remote_address)
                return connection.respond(
                    HTTPStatus.UNAUTHORIZED, "send the header Authorization: Api-Key <key>\n"
                )
        return None

    async def _handle(self, connection: ServerConnection) -> None:
        assert self.batcher is not None
        logger.info("client %s connected", connection.remote_address)
        history = StateHistory(self.reader.policy.history)
        await connection.send(packb(self.metadata))
        previous_total_ms: float | None = None
        try:
            async for message in connection:
                start = time.perf_counter()
                reply = await self._answer(message, history)
                if isinstance(reply, str):
                    await connection.send(reply)  # a text frame: the client raises it
                    continue
                reply["server_timing"] = {"infer_ms": (time.perf_counter() - start) * 1e3}
                if previous_total_ms is not None:
                    reply["server_timing"]["prev_total_ms"] = previous_total_ms
                await connection.send(packb(reply))
                previous_total_ms = (time.perf_counter() - start) * 1e3
        except ConnectionClosed:
            pass
        logger.info("client %s left", connection.remote_address)

    async def _answer(self, message: str | bytes, history: StateHistory) -> dict[str, Any] | str:
        """The reply to one message: a dict, or the text of an error."""
        assert self.batcher is not None
        if isinstance(message, str):
            return "observation: a binary msgpack frame, got a text frame"
        try:
            observation = unpackb(message)
            if isinstance(observation, dict) and "__ctrl__" in observation:
                history.reset()  # episode_start / episode_end: a new episode either way
                return {"ok": True, "ctrl": str(observation["__ctrl__"])}
            request = await asyncio.to_thread(self.reader.read, observation, history)
        except (WireError, ObservationError) as exc:
            return str(exc)
        try:
            chunk, infer_ms = await self.batcher.submit(request)
        except Exception as exc:
            return f"inference failed: {type(exc).__name__}: {exc}"
        return {"actions": chunk, "policy_timing": {"infer_ms": infer_ms}}

    async def serve(self, on_ready: Callable[[PolicyServer], None] | None = None) -> None:
        """Serve until cancelled; `on_ready` is called once the port is bound."""
        self.batcher = Batcher(self.runner, self.max_batch)
        worker = asyncio.create_task(self.batcher.run())
        try:
            async with serve(
                self._handle,
                self.host,
                self.port,
                compression=None,
                max_size=None,
                process_request=self._process_request,
            ) as server:
                self.port = _bound_port(server, self.port)
                logger.info(
                    "serving %s on ws://%s:%d", self.metadata["policy"], self.host, self.port
                )
                if on_ready is not None:
                    on_ready(self)
                await server.serve_forever()
        finally:
            worker.cancel()
            self.batcher.pool.shutdown(wait=False, cancel_futures=True)


def _bound_port(server: Server, asked: int) -> int:
    for sock in server.sockets:
        return int(sock.getsockname()[1])
    return asked


class RunningServer:
    """A PolicyServer on a thread of its own (tests, benchmarks, a simulator's loop).

    `with RunningServer(server) as running: PolicyClient(running.url)`; leaving stops it.
    """

    def __init__(self, server: PolicyServer, timeout: float = 60.0) -> None:
        self.server = server
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="polymimic-serve", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the policy server did not start within {timeout} s")
        if self._error is not None:
            raise RuntimeError(f"the policy server did not start: {self._error}") from self._error

    @property
    def url(self) -> str:
        """`ws://host:port` of the running server."""
        return f"ws://{self.server.host}:{self.server.port}"

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()  # type: ignore[assignment]
            await self.server.serve(on_ready=lambda _: self._ready.set())

        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._ready.set()

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout=30)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
