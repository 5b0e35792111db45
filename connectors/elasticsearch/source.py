"""The Elasticsearch source: the hits of a query, in (timestamp, id) order, each as one record.

Pages are read with ``search_after`` on a sort by ``timestamp_field`` then ``id_field`` (documents
without the timestamp are not read: they would sort last and hide everything after them). The last sort
values are the checkpoint, saved through :class:`connectors.source.SourceWriter` after each page is
acknowledged, so a crash does not write a hit twice. Each record's value is the hit's ``_source``, its
key the ``_id``; ``talos-source`` says ``<index>/<_id>`` and ``talos-position`` the sort values.

With ``follow`` the task asks again every ``poll_ms``, from the newest timestamp read *inclusive*,
skipping the ids it already wrote at that timestamp (kept in the checkpoint as ``tie``): a document with
the same timestamp that became searchable a refresh later is not skipped. Documents back-dated before
the newest timestamp read are not found (append-only indices, as logs are, have none). A page with
failed shards or a timeout is asked again, not taken as the end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Any

import orjson

from connectors.checkpoints import CheckpointStore
from connectors.config import ConnectorConfig, ElasticsearchSourceSettings
from connectors.elasticsearch.client import connect, retriable
from connectors.source import SourceWriter
from connectors.task import Stopped, TaskStatus, backoff_s
from talos import Message

__all__ = ["POSITION_HEADER", "ElasticsearchSourceTask", "PartialResultsError", "not_checkpointed", "search_body"]

log = logging.getLogger("talos.connect.elasticsearch")


POSITION_HEADER = "talos-position"


class PartialResultsError(Exception):
    """The search server answered with failed shards or timed out: the page may lack documents."""


def search_body(settings: ElasticsearchSourceSettings, after: list[Any] | None, *, since: Any = None) -> dict[str, Any]:
    """The request of one page: after the sort values ``after``, or (``since``) from that timestamp on."""
    filters: list[dict[str, Any]] = [{"exists": {"field": settings.timestamp_field}}]
    if since is not None:
        filters.append({"range": {settings.timestamp_field: {"gte": since}}})
    body: dict[str, Any] = {
        "size": settings.batch_size,
        "query": {"bool": {"must": [settings.query], "filter": filters}},
        "sort": [{settings.timestamp_field: "asc"}, {settings.id_field: "asc"}],
    }
    if after is not None and since is None:
        body["search_after"] = after
    return body


def not_checkpointed(message: Message, after: list[Any] | None, tie: set[str]) -> bool:
    """Whether a record written from a hit is past the checkpoint: it sorts after ``after``, or it has
    ``after``'s timestamp and is not among the ``tie`` ids written at that timestamp."""
    if after is None:
        return True
    try:
        position = orjson.loads(message.header(POSITION_HEADER) or b"null")
        if position[0] == after[0]:
            return bool(position > after) or (message.key or b"").decode() not in tie
        return bool(position > after)
    except (TypeError, IndexError, orjson.JSONDecodeError):
        return True  # cannot tell: keep it in mind


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
        with contextlib.ExitStack() as cleanup:
            client = connect(self.settings)
            cleanup.callback(client.close)
            writer = SourceWriter.for_task(
                self.connector, self.status, url=self.url, checkpoints=self._checkpoints, stop=stop
            )
            cleanup.callback(writer.close)
            state = writer.recover().get(str(self.status.task), {})
            after: list[Any] | None = state.get("after")
            tie: set[str] = set(state.get("tie", []))
            writer.expect(lambda message: not_checkpointed(message, after, tie))
            caught_up = False
            while not stop.is_set():
                since = after[0] if caught_up and after is not None else None
                hits = self._search(client, search_body(self.settings, after, since=since), stop)
                for hit in hits:
                    if after is not None and hit["sort"][0] == after[0] and hit["_id"] in tie:
                        continue  # written already: the follow query reads the newest timestamp again
                    writer.send(
                        f"{hit['_index']}/{hit['_id']}",
                        _json(hit.get("_source", {})),
                        key=str(hit["_id"]).encode(),
                        headers={POSITION_HEADER: _json(hit["sort"])},
                    )
                if hits:
                    last = hits[-1]["sort"]
                    at_last = {hit["_id"] for hit in hits if hit["sort"][0] == last[0]}
                    seen_tie = at_last | (tie if after is not None and last[0] == after[0] else set())
                    if last != after or seen_tie != tie:  # else only the tie, read again: nothing new
                        after, tie = last, seen_tie
                        writer.commit({"after": after, "tie": sorted(tie)})
                        self.status.detail["after"] = after
                caught_up = len(hits) < self.settings.batch_size
                if caught_up:
                    if not self.settings.follow:
                        break  # read to the end
                    writer.idle({"after": after, "tie": sorted(tie)})
                    stop.wait(self.settings.poll_ms / 1000)
            writer.commit({"after": after, "tie": sorted(tie)})  # stopped gracefully, or finished

    def _search(self, client: Any, body: dict[str, Any], stop: threading.Event) -> list[dict[str, Any]]:
        attempt = 0
        while True:
            try:
                answer = client.search(
                    index=self.settings.index,
                    body=body,
                    params={"ignore_unavailable": "true", "allow_no_indices": "true"},  # not there yet: no hits
                )
                if answer.get("timed_out") or answer.get("_shards", {}).get("failed"):
                    raise PartialResultsError(f"timed out: {answer.get('timed_out')}, shards: {answer.get('_shards')}")
                self.status.state, self.status.error = "running", None
                return list(answer["hits"]["hits"])
            except Exception as exc:
                if not (retriable(exc) or isinstance(exc, PartialResultsError)):
                    raise
                delay = min(backoff_s(attempt), 10.0)
                attempt += 1
                self.status.state, self.status.error = "retrying", f"{self.settings.hosts[0]}: {exc}"
                log.warning("%s: search failed (%s); retrying in %.0f s", self.status.name, exc, delay)
                if stop.wait(delay):
                    raise Stopped from None


def _json(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # integers wider than 64 bits, which JSON allows
        return json.dumps(value).encode()
