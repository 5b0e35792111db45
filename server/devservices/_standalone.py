"""A ``talos standalone`` server as a managed subprocess (tests, benchmarks)."""

from __future__ import annotations

import os
import ssl
import sys
from pathlib import Path

from server.devservices._process import ManagedProcess, free_port, shutdown_wait_s, wait_http_ready

__all__ = ["StandaloneServer"]


class StandaloneServer:
    """``talos standalone`` on a free port with its data in ``data_dir``; ready when ``/readyz`` answers."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        source: Path | None = None,
        tls_ca: Path | None = None,
        tls_client_cert: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        # The CA that signs the server's certificate, when its args or env turn TLS on: then it serves https (and
        # the readiness check presents ``tls_client_cert``, for a server that requires client certificates).
        self.tls_ca = tls_ca
        self.tls_client_cert = tls_client_cert
        self.source = source  # run the server of this checkout (its modules come first: the working directory)
        self.port = port or free_port()
        self.args = args
        self.env = env
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_ca is not None else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> StandaloneServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "talos.cli",
            "standalone",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--log-format",
            "text",
            *self.args,
        ]
        self.process = ManagedProcess(
            "talos",
            argv,
            log_path=self.data_dir.parent / f"server-{self.port}.log",
            cwd=self.source,
            env={**os.environ, **(self.env or {})},
        )
        self.process.start()

        context = ssl.create_default_context(cafile=str(self.tls_ca)) if self.tls_ca is not None else None
        if context is not None and self.tls_client_cert is not None:
            context.load_cert_chain(self.tls_client_cert)
        wait_http_ready(
            self.process, f"{self.url}/readyz", timeout=timeout, what=f"talos standalone on {self.url}", context=context
        )
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        """SIGTERM (graceful: flush and seal), SIGKILL if still running after its shutdown deadline and a slack."""
        if self.process is not None:
            self.process.stop(timeout=shutdown_wait_s(self.process.env))
