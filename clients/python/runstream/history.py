"""A client for the History API over HTTP (docs/api.md), on the standard library only.

Every method is synchronous; :class:`AsyncHistoryClient` runs the same calls in a thread.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode

from runstream._common import RunstreamError

MAX_LIMIT = 1000
# The highest seq History accepts as a cursor: `before_seq` = this reads a thread from its head.
MAX_SEQ = 2**53 - 1


def _seg(s: str) -> str:
    return quote(s, safe="")


class HistoryClient:
    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 30.0):
        self.base = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        # Never through a proxy: the broker is addressed directly.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None) -> Any:
        query = {}
        for k, v in (params or {}).items():
            if v is None:
                continue
            if isinstance(v, (list, tuple, set)):
                if v:
                    query[k] = ",".join(v)
            elif isinstance(v, bool):
                query[k] = "true" if v else "false"
            else:
                query[k] = str(v)
        url = self.base + path + (f"?{urlencode(query)}" if query else "")
        headers = {"accept": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as res:
                text = res.read().decode()
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            try:
                e = json.loads(text)["error"]
                raise RunstreamError(e["code"], e["message"], status=err.code) from None
            except (ValueError, KeyError, TypeError):
                raise RunstreamError("internal", text or str(err), status=err.code) from None
        except OSError as err:
            raise RunstreamError("connection_failed", f"{method} {path}: {err}") from None
        return json.loads(text) if text else {}

    def list_events(
        self,
        thread_id: str,
        *,
        run_id: str | None = None,
        after_seq: int | None = None,
        before_seq: int | None = None,
        limit: int | None = None,
        categories: list[str] | None = None,
        event_types: list[str] | None = None,
        user_id: str | None = None,
        wait_ms: int | None = None,
    ) -> dict:
        path = f"/v1/threads/{_seg(thread_id)}" + (f"/runs/{_seg(run_id)}" if run_id else "") + "/events"
        return self.request(
            "GET",
            path,
            {
                "after_seq": after_seq,
                "before_seq": before_seq,
                "limit": limit,
                "categories": categories,
                "event_types": event_types,
                "user_id": user_id,
                "wait_ms": wait_ms,
            },
        )

    def list_messages(self, thread_id: str, *, run_id: str | None = None, view: str | None = None, **paging) -> dict:
        path = f"/v1/threads/{_seg(thread_id)}" + (f"/runs/{_seg(run_id)}" if run_id else "") + "/messages"
        return self.request("GET", path, {**paging, "view": view})

    def count_messages(self, thread_id: str, *, run_id: str | None = None, user_id: str | None = None) -> int:
        body = self.request(
            "GET", f"/v1/threads/{_seg(thread_id)}/messages/count", {"run_id": run_id, "user_id": user_id}
        )
        return int(body["count"])

    def get_run(self, thread_id: str, run_id: str, *, user_id: str | None = None) -> dict:
        return self.request("GET", f"/v1/threads/{_seg(thread_id)}/runs/{_seg(run_id)}", {"user_id": user_id})

    def list_runs(self, thread_id: str, **params) -> dict:
        return self.request("GET", f"/v1/threads/{_seg(thread_id)}/runs", params)

    def delete_thread(self, thread_id: str, *, user_id: str | None = None) -> dict:
        return self.request("DELETE", f"/v1/threads/{_seg(thread_id)}", {"user_id": user_id})

    def delete_run(self, thread_id: str, run_id: str, *, user_id: str | None = None) -> dict:
        return self.request("DELETE", f"/v1/threads/{_seg(thread_id)}/runs/{_seg(run_id)}", {"user_id": user_id})

    def cancel_run(self, thread_id: str, run_id: str, reason: str | None = None) -> dict:
        body = {} if reason is None else {"reason": reason}
        return self.request("POST", f"/v1/threads/{_seg(thread_id)}/runs/{_seg(run_id)}/cancel", body=body)


class AsyncHistoryClient:
    """:class:`HistoryClient`'s calls, awaited (each runs in a worker thread)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 30.0):
        self.sync = HistoryClient(url, token=token, timeout_s=timeout_s)

    def __getattr__(self, name: str):
        fn = getattr(self.sync, name)

        async def call(*args, **kwargs):
            return await asyncio.to_thread(fn, *args, **kwargs)

        return call
