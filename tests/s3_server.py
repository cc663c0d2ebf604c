"""A real S3-compatible server for tests: moto's standalone server (`python -m moto.server`), a process of
its own bound to 127.0.0.1 on a free port, stopped by its pid."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

# moto accepts any credentials; boto3 and the brokers it starts read these from the environment.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class S3Server:
    def __init__(self) -> None:
        port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **CREDENTIALS},
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).close()
                return
            except (urllib.error.URLError, OSError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto's S3 server did not start on {self.endpoint}") from None
                time.sleep(0.05)

    def client(self) -> Any:
        import boto3

        return boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        ).client("s3", endpoint_url=self.endpoint)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, 9)
                self.proc.wait()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)  # for the boto3 clients of this process
    server = S3Server()
    try:
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
