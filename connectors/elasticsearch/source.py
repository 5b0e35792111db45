"""The Elasticsearch source: the hits of a query, in (timestamp, id) order, each as one record.

Pages are read with ``search_after`` on a sort by ``timestamp_field`` then ``id_field``; the last sort
values are the checkpoint, saved through :class:`connectors.source.SourceWriter` after each page is
acknowledged (so a crash does not write a hit twice). Each record's value is the hit's ``_source``, its
key the ``_id``, and ``talos-source`` says ``<index>/<_id>``. With ``follow`` the task keeps asking for
documents after the last one every ``poll_ms``; that finds documents whose timestamp is not older than
the newest one read (append-only indices, as logs are), not back-dated ones.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import orjson

from connectors.checkpoints import CheckpointStore
from connectors.config import ConnectorConfig, ElasticsearchSourceSettings
from connectors.elasticsearch.client import connect, retriable
from connectors.source import SourceWriter
from connectors.task import Stopped, TaskStatus, backoff_s

__all__ = ["ElasticsearchSourceTask", "search_body"]

log = logging.getLogger("talos.connect.elasticsearch")


def search_body(settings: ElasticsearchSourceSettings, after: list[Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "size": settings.batch_size,
        "query": settings.query,
        "sort": [{settings.timestamp_field: "asc"}, {settings.id_field: "asc"}],
    }
    if after is not None:
        body["search_after"] = after
    return body


class ElasticsearchSourceTask:
    def __init__(
        self, *, url: str, connector: ConnectorConfig, status: TaskStatus, checkpoints: CheckpointStore
    ) -> None:
        self.url = url
        self.connector = connector
        self.settings: ElasticsearchSourceSettings = connector.settings
        self.status = status
        self._checkpoints = checkpoints

    def run(self, stop: threading.Event) -> None:
        assert self.connector.topic is not None
        client = connect(self.settings)
        writer = SourceWriter(
            url=self.url,
            topic=self.connector.topic,
            connector=self.connector.name,
            task=self.status.task,
            checkpoints=self._checkpoints,
            status=self.status,
        )
        try:
            after: list[Any] | None = writer.recover().get(str(self.status.task), {}).get("after")
            while not stop.is_set():
                hits = self._search(client, after, stop)
                for hit in hits:
                    source = orjson.dumps(hit.get("_source", {}))
                    writer.send(f"{hit['_index']}/{hit['_id']}", source, key=str(hit["_id"]).encode())
                if hits:
                    after = hits[-1]["sort"]
                    writer.commit({"after": after})
                    self.status.detail["after"] = after
                if len(hits) < self.settings.batch_size:
                    if not self.settings.follow:
                        return  # read to the end
                    stop.wait(self.settings.poll_ms / 1000)
        finally:
            writer.close()
            client.close()

    def _search(self, client: Any, after: list[Any] | None, stop: threading.Event) -> list[dict[str, Any]]:
        attempt = 0
        while True:
            try:
                answer = client.search(
                    index=self.settings.index,
                    body=search_body(self.settings, after),
                    params={"ignore_unavailable": "true", "allow_no_indices": "true"},  # not there yet: no hits
                )
                self.status.state, self.status.error = "running", None
                return list(answer["hits"]["hits"])
            except Exception as exc:
                if not retriable(exc):
                    raise
                delay = min(backoff_s(attempt), 10.0)
                attempt += 1
                self.status.state, self.status.error = "retrying", f"{self.settings.hosts[0]}: {exc}"
                log.warning("%s: search failed (%s); retrying in %.0f s", self.status.name, exc, delay)
                if stop.wait(delay):
                    raise Stopped from None
