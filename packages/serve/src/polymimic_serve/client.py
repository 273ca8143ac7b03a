"""A client of the policy server, speaking as openpi-client's WebsocketClientPolicy does.

It connects with no compression and no message size cap, reads the metadata frame, then
sends one msgpack observation per `infer` and reads one reply; a text frame is the server
naming what was wrong, raised as RuntimeError (as openpi's client raises it). Unlike
openpi's, `reset()` tells the server: the next observation carries `reset: true`, so the
state history restarts with the episode.
"""

from __future__ import annotations

from typing import Any

from websockets.sync.client import ClientConnection, connect

from polymimic_serve.wire import packb, unpackb


class PolicyClient:
    """`PolicyClient("ws://127.0.0.1:8000")` (or host and port); `infer(observation)`."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        api_key: str | None = None,
        open_timeout: float = 30.0,
    ) -> None:
        self.url = host if host.startswith("ws") else f"ws://{host}"
        if port is not None:
            self.url += f":{port}"
        headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self._connection: ClientConnection = connect(
            self.url,
            compression=None,
            max_size=None,
            additional_headers=headers,
            open_timeout=open_timeout,
            proxy=None,  # a robot's proxy settings must not route loopback or the lab's LAN
        )
        metadata = self._connection.recv()
        if isinstance(metadata, str):
            raise RuntimeError(f"Error in inference server:\n{metadata}")
        self._metadata = unpackb(metadata)
        self._reset = False

    def get_server_metadata(self) -> dict[str, Any]:
        """The metadata the server sent on connect."""
        return self._metadata

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        """The server's reply to one observation; RuntimeError with the server's words."""
        if self._reset:
            observation = {**observation, "reset": True}
        self._connection.send(packb(observation))
        reply = self._connection.recv()
        if isinstance(reply, str):  # refused: the server's history is as it was, reset pending
            raise RuntimeError(f"Error in inference server:\n{reply}")
        self._reset = False
        return unpackb(reply)

    def reset(self) -> None:
        """A new episode: the next observation restarts the server's state history."""
        self._reset = True

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
