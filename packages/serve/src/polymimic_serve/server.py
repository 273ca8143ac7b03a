"""The policy server: openpi's websocket protocol, so openpi's robot runtimes drive it unchanged.

On connect the server sends one binary msgpack frame of metadata (a dict, see
`ObservationReader.metadata`); then each binary msgpack observation gets one binary msgpack
reply, `{"actions": float32 (T, A) in the data's units, "policy_timing": {"infer_ms"},
"server_timing": {"infer_ms", "prev_total_ms"}}`. A bad observation gets one text frame
naming the key and what was expected (openpi's client raises it as RuntimeError), and the
connection goes on: every error on a connection is answered so, and only a protocol
violation (e.g. a message over the size cap: close code 1009) closes it, with a reason.
openpi's `__ctrl__` messages (episode_start, episode_end) and `reset: true` restart the
client's state history; so does a new connection.

What reaches a robot is finite: a chunk that is not is an error reply, and the observation
that caused it leaves the state history as it was.

One model serves every client: the requests waiting together run as one batch (up to
`max_batch`, 8 by default). Reading messages, resizing images and inference run off the
event loop (a message past 4 MiB on a thread of its own, one at a time, so a client sending
the largest messages holds one core, not every thread), so keep-alive pings are answered
during a slow call. A message is capped at
`max_message_bytes` (by default room for max(4, the policy's cameras) frames at 1080x1920,
plus 1 MiB), refused by the websocket layer before its bytes are held; what it holds is
bounded by `WireLimits` (see wire) and each frame by the reader's pixel bounds.
`GET /healthz` answers 200. With `api_key`, a connection without exactly one
`Authorization: Api-Key <key>` header gets 401 before any model work, and an address that
keeps failing gets 429 for a while (`AuthThrottle`). It binds 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import threading
import time
from collections import deque
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
from polymimic_serve.trained_policy import NonFiniteActions, TrainedPolicy
from polymimic_serve.wire import BRIEF, WireError, WireLimits, packb, unpackb

logger = logging.getLogger("polymimic_serve")

Result = tuple[np.ndarray, float]  # a chunk and the milliseconds its batch took
FRAME_BYTES = 1080 * 1920 * 3  # one camera frame at a generous resolution
DEFAULT_MAX_BATCH = 8
LARGE_MESSAGE = 4 << 20  # bytes: messages past this are read one at a time, on their own thread


def return_large_buffers_to_the_system() -> None:
    """Have glibc give freed buffers of 1 MiB and more back to the system at once.

    Otherwise each freed message-sized buffer raises glibc's mmap threshold (up to 32 MiB),
    later ones come from per-thread arenas and stay in the server's memory: measured, a
    25 MB message left 12x its size resident, 7x with this. Not glibc: nothing to do.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


LARGE_READ_NICENESS = 10  # added to the large-message thread's: it yields a core to inference


def yield_to_inference() -> None:
    """Lower the calling thread's scheduling priority (Linux: a thread's own niceness).

    The large-message thread runs at niceness +10, so a client sending the largest messages
    gets the cores that inference leaves idle rather than an equal share: measured by
    bench-serve on a 2-core CPU, another client's p99 while one sends frames at the pixel
    bound went from 2.9x to 2.4x its unloaded p99 (p50 from 2.0x to 1.1x). Elsewhere (no
    per-thread niceness, or not permitted) nothing changes.
    """
    with contextlib.suppress(AttributeError, OSError):
        thread = threading.get_native_id()
        niceness = os.getpriority(os.PRIO_PROCESS, thread) + LARGE_READ_NICENESS
        os.setpriority(os.PRIO_PROCESS, thread, min(niceness, 19))


def wire_limits(policy: TrainedPolicy, max_message_bytes: int | None = None) -> WireLimits:
    """What one message to a server of `policy` may hold (see the module docstring)."""
    cameras = max(4, len(policy.cameras))
    size = max_message_bytes or cameras * FRAME_BYTES + (1 << 20)
    numbers = policy.horizon * (policy.layout.dim + 1)  # an rtc chunk sent as lists
    return WireLimits(
        max_message_bytes=size,
        max_array_elements=size,
        max_items=max(4096, 4 * numbers),
        max_str_bytes=1 << 16,
        max_depth=8,
    )


class AuthThrottle:
    """Failed api-key attempts per client address: `burst` within `window` s, then 429.

    One log line per burst of refusals from an address, not one per attempt.
    """

    def __init__(
        self, burst: int = 5, window: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst, self.window, self.clock = burst, window, clock
        self.failures: dict[str, deque[float]] = {}
        self.unlogged: dict[str, int] = {}

    def _recent(self, address: str) -> deque[float]:
        now, times = self.clock(), self.failures.setdefault(address, deque())
        while times and now - times[0] > self.window:
            times.popleft()
        return times

    def wait_s(self, address: str) -> float:
        """Seconds `address` must wait before its key is looked at again (0: go ahead)."""
        times = self._recent(address)
        if len(times) < self.burst:
            if not times:
                del self.failures[address]  # keep the table to addresses that fail now
            return 0.0
        return max(0.0, self.window - (self.clock() - times[0]))

    def failed(self, address: str) -> None:
        """Count a refusal; log the first of a burst (with how many went unlogged before)."""
        if len(self.failures) > 4096:  # many addresses failing once: forget the old ones
            now = self.clock()
            for old in [a for a, t in self.failures.items() if not t or now - t[-1] > self.window]:
                del self.failures[old]
                self.unlogged.pop(old, None)
        times = self._recent(address)
        if not times:
            before = self.unlogged.pop(address, 0)
            logger.warning(
                "refused %s: no or a wrong api key%s (further refusals from it within %g s "
                "are counted, not logged)",
                address,
                f"; {before} more refused before" if before else "",
                self.window,
            )
        else:
            self.unlogged[address] = self.unlogged.get(address, 0) + 1
        times.append(self.clock())


class Batcher:
    """Requests from every client, run one batch at a time on one inference thread."""

    def __init__(self, runner: PolicyRunner, max_batch: int = DEFAULT_MAX_BATCH) -> None:
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
                if future.done():
                    continue
                if isinstance(chunk, NonFiniteActions):
                    future.set_exception(chunk)
                else:
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
        max_batch: int = DEFAULT_MAX_BATCH,
        seed: int = 0,
        max_message_bytes: int | None = None,
    ) -> None:
        self.reader = ObservationReader(policy, dict(camera_map or {}), state_key)
        self.metadata = self.reader.metadata()
        self.runner = PolicyRunner(policy, seed)
        self.limits = wire_limits(policy, max_message_bytes)
        self.host, self.port, self.api_key, self.max_batch = host, port, api_key, max_batch
        self.batcher: Batcher | None = None
        self.throttle = AuthThrottle()
        # made by serve(): one large message is read at a time, an abuser holds one core
        self.large_reads: ThreadPoolExecutor | None = None

    def _process_request(
        self, connection: ServerConnection, request: HTTPRequest
    ) -> Response | None:
        if request.path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if self.api_key is None:
            return None
        address = str(connection.remote_address[0]) if connection.remote_address else "?"
        wait = self.throttle.wait_s(address)
        if wait > 0:
            response = connection.respond(
                HTTPStatus.TOO_MANY_REQUESTS, "too many refused api keys; try again later\n"
            )
            response.headers["Retry-After"] = str(int(wait) + 1)
            return response
        sent = request.headers.get_all("Authorization")
        expected = f"Api-Key {self.api_key}".encode()
        if len(sent) == 1 and hmac.compare_digest(sent[0].encode(errors="replace"), expected):
            return None
        self.throttle.failed(address)
        return connection.respond(
            HTTPStatus.UNAUTHORIZED, "send one header Authorization: Api-Key <key>\n"
        )

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
        """The reply to one message: a dict, or the text of an error (never an exception)."""
        assert self.batcher is not None
        if isinstance(message, str):
            return "observation: a binary msgpack frame, got a text frame"
        try:
            if len(message) > LARGE_MESSAGE and self.large_reads is not None:
                loop = asyncio.get_running_loop()
                request = await loop.run_in_executor(self.large_reads, self._read, message, history)
            else:
                request = await asyncio.to_thread(self._read, message, history)
        except (WireError, ObservationError) as exc:
            return str(exc)
        except Exception as exc:  # a bug of ours: the client still gets its text frame
            logger.exception("reading an observation failed")
            return f"the server could not read this observation ({type(exc).__name__})"
        if isinstance(request, dict):
            return request  # a control message's answer
        try:
            chunk, infer_ms = await self.batcher.submit(request)
        except NonFiniteActions as exc:
            history.undo(request)
            return str(exc)
        except Exception as exc:
            history.undo(request)
            return f"inference failed: {type(exc).__name__}: {str(exc)[: 4 * BRIEF]}"
        return {"actions": chunk, "policy_timing": {"infer_ms": infer_ms}}

    def _read(self, message: bytes, history: StateHistory) -> Request | dict[str, Any]:
        """One message as a Request, or a control message's answer (runs off the loop)."""
        observation = unpackb(message, self.limits)
        if isinstance(observation, dict) and "__ctrl__" in observation:
            control = observation["__ctrl__"]
            if not isinstance(control, str) or len(control) > BRIEF:
                raise ObservationError("__ctrl__: a short string (episode_start, episode_end)")
            history.reset()  # episode_start / episode_end: a new episode either way
            return {"ok": True, "ctrl": control}
        return self.reader.read(observation, history)

    async def serve(self, on_ready: Callable[[PolicyServer], None] | None = None) -> None:
        """Serve until cancelled; `on_ready` is called once the port is bound."""
        return_large_buffers_to_the_system()
        self.large_reads = ThreadPoolExecutor(
            1, thread_name_prefix="polymimic-large-read", initializer=yield_to_inference
        )
        self.batcher = Batcher(self.runner, self.max_batch)
        worker = asyncio.create_task(self.batcher.run())
        try:
            async with serve(
                self._handle,
                self.host,
                self.port,
                compression=None,
                max_size=self.limits.max_message_bytes,
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
            self.large_reads.shutdown(wait=False, cancel_futures=True)


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
