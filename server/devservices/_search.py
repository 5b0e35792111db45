"""A real search server speaking the Elasticsearch/OpenSearch REST API: ``osmem-server`` (PyPI), an
independent in-memory implementation, on a loopback port. For the Elasticsearch connectors' tests."""

from __future__ import annotations

from pathlib import Path

from server.devservices._process import ManagedProcess, ServiceError, free_port, wait_http_ready

__all__ = ["SearchServer"]


def _binary() -> str:
    try:
        from osmem_server import resolve_binary
    except ImportError:
        raise ServiceError(
            "the search server needs the dev extra: pip install 'talos-mq[dev]' (osmem-server)"
        ) from None
    return str(resolve_binary())


class SearchServer:
    """``osmem-server`` on ``port`` (free by default); ready when ``GET /`` answers."""

    def __init__(self, base_dir: Path, *, port: int | None = None) -> None:
        self.base_dir = base_dir
        self.port = port or free_port()
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> SearchServer:
        argv = [_binary(), "-addr", f"127.0.0.1:{self.port}", "-no-stdin-watch", "-no-ja"]
        self.process = ManagedProcess("osmem-server", argv, log_path=self.base_dir / f"search-{self.port}.log")
        self.process.start()
        wait_http_ready(self.process, self.url, timeout=timeout, what=f"the search server on {self.url}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
