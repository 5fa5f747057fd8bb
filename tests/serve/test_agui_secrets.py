"""A model whose base URL carries credentials, served over AG-UI: its failures reach the ``RUN_ERROR`` event,
the ``CUSTOM`` retry events, the session's feed (its log), its turns and the server's log records — with the
URL shown masked and no secret anywhere. The model talks to the real loopback OpenAI-compatible server.

Bad inputs tried: a model server answering 401 with a body quoting the proxy password, one answering 500
(retried) quoting the query key, and a base URL where nothing listens.
"""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import pytest

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.model.openai import OpenAIChatModel
from rxagent.redaction import MASK
from tests.model.openai_server import (
    API_KEY,
    FAST_RETRY,
    PASSWORD,
    PROXY_USER,
    QUERY_KEY,
    OpenAIServer,
    Reply,
    assert_no_secret,
    client_log,
    with_credentials,
)
from tests.serve.conftest import is_result_of, serving

SHOWN = f"http://{PROXY_USER}:{MASK}@127.0.0.1:"
"""How the model's URL starts wherever it is shown."""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once the probe is closed


FAILURES = {
    "401_quoting_the_password": [Reply.json({"error": {"message": f"wrong password {PASSWORD}"}}, 401)],
    "500_quoting_the_query_key": [Reply.error(500, f"no deployment for api-key={QUERY_KEY}")] * 3,
    "nothing_listening": [],
}


@pytest.mark.parametrize("failure", FAILURES.keys())
async def test_a_credentialed_model_url_never_shows_in_events_feed_or_log(
    server: OpenAIServer, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    server.script(*FAILURES[failure])
    base_url = server.base_url if failure != "nothing_listening" else f"http://127.0.0.1:{closed_port()}/v1"
    model = OpenAIChatModel(
        "test-model", base_url=with_credentials(base_url), api_key=API_KEY, retry=FAST_RETRY
    )
    caplog.set_level(logging.DEBUG)
    body: dict[str, Any] = {
        "threadId": "t",
        "runId": "r",
        "state": {},
        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    async with serving(ReActAgent(model, options=AgentOptions(retry_budget=2))) as live:
        async with live.sse("/ag-ui", json=body) as stream:
            events = [json.loads(e.data) for e in await stream.rest()]
        started, error = events[0], events[-1]
        assert started["type"] == "RUN_STARTED"
        async with live.sse("/api/sessions/t/feed") as feed:  # the session's log, fact by fact
            facts = [e.data for e in await feed.until(is_result_of(started["metadata"]["rxagent_run_id"]))]
        turns = await live.get("/api/sessions/t/turns")
        # The stream ends with RUN_ERROR while the run is still being saved: wait for its end (and its log
        # line) before the server stops, which would cancel what still runs.
        await live.agent.session(RuntimeContext(session_id="t")).wait()

    assert error["type"] == "RUN_ERROR"
    for shown in (json.dumps(events), *facts, json.dumps(turns), client_log(caplog)):
        assert_no_secret(shown)
    (failed,) = [r for r in caplog.records if r.name == "rxagent.serve.runs" and r.levelno == logging.WARNING]
    if failure == "nothing_listening":
        assert "Cannot connect to host 127.0.0.1" in error["message"]
        assert "Cannot connect to host 127.0.0.1" in failed.getMessage()
        return
    assert SHOWN in error["message"]
    assert f"/v1/chat/completions?api-version=2024-06-01&api-key={MASK}" in error["message"]
    assert SHOWN in failed.getMessage()
    assert any(SHOWN in fact for fact in facts)  # the error event, as the log keeps it
    retries = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "rxagent.retry_scheduled"]
    if failure == "500_quoting_the_query_key":
        assert retries  # the retries were told, each with the error
        assert all(SHOWN in retry["value"]["error"] for retry in retries)
        assert all(MASK in retry["value"]["error"] for retry in retries)
    else:
        assert not retries  # a 401 is not retried
