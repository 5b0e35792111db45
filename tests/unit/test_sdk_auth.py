"""The SDK's side of auth and quotas, with the network swapped for a function: the bearer header, the
``TALOS_TOKEN`` fallback, the error classes of 401/403/429, and the precise wait of a 429."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
import pytest

from talos import Admin, AuthenticationError, PermissionDeniedError, QuotaExceededError, Response
from talos._transport import Transport, authorized, check


class Recorder:
    """A transport that answers from a script and records the headers it was given."""

    def __init__(self, answer: Response) -> None:
        self.answer = answer
        self.headers: list[dict[str, str]] = []

    def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Response:
        self.headers.append(dict(headers or {}))
        return self.answer

    def close(self) -> None:
        pass


OK = Response(200, {}, b'{"topics": []}')


def test_the_token_goes_as_a_bearer_header_and_falls_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(OK)
    Admin("http://x", transport=recorder, token="t1").list_topics()
    assert recorder.headers[-1]["authorization"] == "Bearer t1"
    monkeypatch.setenv("TALOS_TOKEN", "from-env")
    Admin("http://x", transport=recorder).list_topics()
    assert recorder.headers[-1]["authorization"] == "Bearer from-env"
    Admin("http://x", transport=recorder, token="").list_topics()  # explicitly none
    assert "authorization" not in recorder.headers[-1]
    monkeypatch.delenv("TALOS_TOKEN")
    plain: Transport = recorder
    assert authorized(plain, None) is plain


def error(status: int, code: str, headers: dict[str, str] | None = None, **extra: object) -> Response:
    body = {"error": {"code": code, "message": "m", "retriable": status == 429, **extra}}
    return Response(status, headers or {}, orjson.dumps(body))


def test_auth_and_quota_answers_become_their_own_errors() -> None:
    with pytest.raises(AuthenticationError):
        check(error(401, "UNAUTHENTICATED"))
    with pytest.raises(PermissionDeniedError):
        check(error(403, "FORBIDDEN"))
    with pytest.raises(QuotaExceededError) as whole_seconds:
        check(error(429, "QUOTA_EXCEEDED", {"retry-after": "2"}))
    assert whole_seconds.value.retry_after == 2.0 and whole_seconds.value.retriable
    with pytest.raises(QuotaExceededError) as precise:
        check(error(429, "QUOTA_EXCEEDED", {"retry-after": "1"}, retry_after_ms=125.0))
    assert precise.value.retry_after == pytest.approx(0.125)  # the body's precise wait wins over whole seconds
