"""A local S3-compatible server for tests and benchmarks only: never for real data.

`S3TestServer.start()` runs moto's server (`python -m moto.server`, from the test
dependencies, never imported here) as a subprocess on 127.0.0.1 at a free port, waits until
it answers, and stops it by its pid on `stop()` (or at the end of a `with` block). Its
`env` holds the usual AWS variables that point a client at it (AWS_ENDPOINT_URL, test
credentials, a region). Its request log lets a test count what was downloaded.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

_REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[\d.]+" (\d+)')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3TestServer:
    """A running moto server; see the module's docstring."""

    endpoint: str
    pid: int
    log_path: Path
    _process: subprocess.Popen[bytes] = field(repr=False)

    @classmethod
    def start(cls, timeout_s: float = 30.0) -> S3TestServer:
        log_path = Path(tempfile.mkdtemp(prefix="s3-test-server-")) / "requests.log"
        for _ in range(3):  # the free port may be taken between the probe and the bind
            port = _free_port()
            with log_path.open("ab") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=os.environ | {"PYTHONUNBUFFERED": "1"},
                )
            server = cls(f"http://127.0.0.1:{port}", process.pid, log_path, process)
            if server._wait_until_up(timeout_s):
                return server
            server.stop()
        raise RuntimeError(f"moto's S3 server did not start; its output:\n{log_path.read_text()}")

    def _wait_until_up(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=1):
                    return True
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        return False

    @property
    def env(self) -> dict[str, str]:
        """The environment a client needs to use this server (and nothing of the user's)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",  # never ask a cloud machine's metadata
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_CONFIG_FILE": os.devnull,
        }

    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path with query, status) of every request served so far, in order."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [(m[1], m[2], int(m[3])) for line in lines if (m := _REQUEST.search(line))]

    def object_reads(self) -> list[str]:
        """The path (/bucket/key) of every object downloaded so far (GETs of objects)."""
        return [p for method, p, _ in self.requests() if method == "GET" and "?" not in p]

    def filesystem(self) -> Any:
        """An s3fs filesystem on this server, whatever the environment says."""
        import fsspec

        return fsspec.filesystem(
            "s3",
            key="testing",
            secret="testing",
            client_kwargs={"endpoint_url": self.endpoint},
            skip_instance_cache=True,
        )

    def upload(self, folder: str | os.PathLike[str], url: str) -> None:
        """Every file under `folder` to `url` (s3://bucket/prefix), the bucket made if new."""
        fs = self.filesystem()
        prefix = url.removeprefix("s3://").rstrip("/")
        bucket = prefix.split("/", 1)[0]
        if not fs.exists(bucket):
            fs.mkdir(bucket)
        files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
        remote = [f"{prefix}/{p.relative_to(folder).as_posix()}" for p in files]
        fs.put([str(p) for p in files], remote)

    def require_credentials(self, required: bool = True) -> None:
        """From now on, refuse (or accept again) credentials the server does not know."""
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0" if required else b"inf",
            headers={"Content-Type": "text/plain"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        if self._process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self._process.wait()
        shutil.rmtree(self.log_path.parent, ignore_errors=True)

    def __enter__(self) -> S3TestServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
