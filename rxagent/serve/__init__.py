"""The live surface: an agent's sessions on HTTP — the session API with its SSE feed, AG-UI, the Vercel AI
SDK's chat route and a dashboard.

``rxagent serve`` (or :class:`AgentServer` from Python) serves one agent's sessions. Needs the extra:
``pip install 'rxagent[serve]'`` (AG-UI's types and encoder, from ``ag-ui-protocol``).

The contract
============

JSON in and out unless it says SSE. A session is named by its id (1–128 letters, digits and ``._:@-``,
starting with a letter or a digit; the store key has no user id). A session exists once its log has a
fact (or a run submitted here waits for its turn); ``POST …/runs``, ``POST /ag-ui`` and ``POST /api/chat``
make new ones.

Errors are ``{"error": "<clear message>"}`` and **nothing changes** on one:

=====  =======================================================================================
400    malformed input: not JSON, not an object, an unknown or missing field, a wrong type, an
       empty text, an invalid session id, a bad ``after`` / ``Last-Event-ID``, lists and objects
       nested deeper than 100 levels (checked before the body is parsed), text that is not valid
       Unicode (a lone surrogate such as ``"\\udc80"``, which UTF-8 cannot encode)
401    a token is set and the request does not carry it (the health checks need none)
403    a change (POST, DELETE) from another origin
404    no such session, run (or route)
408    a body that did not arrive whole within ``body_timeout`` (30 s); the connection is closed
409    the input does not fit the session now: an answer for a call that is not pending (unknown
       id, answered twice, the wrong kind of answer), edited arguments the tool refuses, new text
       while calls wait for answers, answers while a run is going or queued. A call takes one
       answer, the first: a second one (another tab, another server) is refused, with ``call_id``,
       ``taken`` (``approval``, ``denial``, ``external_result``) and ``taken_by`` (the run) beside
       ``error``, and no run starts. Also: new work while calls are uncertain (the body's
       ``uncertain`` lists them), an outcome for a call that is not uncertain, or an AG-UI
       reconciliation that leaves one out; a feed position past the log's head (the body's ``head``
       and ``reconnect_from`` say where to resume); a session whose log holds a fact that cannot be
       read (``unreadable_fact``: its sequence number), on every endpoint that reads the session.
       Deleting a session whose run is going or queued (``state``), cancelling a run that is not queued
       (``run_status``)
413    a body over the limit (1 MiB by default): at once from its ``Content-Length``, before any of it is
       read, and the connection is closed
415    a body that is not ``application/json``
421    a request not addressed to the server's loopback name (without a token)
503    the server is stopping; or it holds ``max_connections`` connections (1000) already: that one more is
       answered ``503`` with ``Retry-After: 1`` and closed
=====  =======================================================================================

Sessions
--------
``GET /api/sessions``
    ``{"sessions": [{"session_id", "facts", "updated_at", "owner"}]}``, newest first (``facts``: the
    sequence number of its last fact; ``owner``: who holds its lease now, or ``null``).
``GET /api/feed`` — SSE
    The sessions list, live: ``event: sessions`` with the whole list first (newest first), then
    ``event: session`` with each session that is new or changed, ``event: removed`` for one deleted. Each
    is a summary: ``{"session_id", "title", "state", "error", "facts", "updated_at", "owner", "queued"}``
    (``title``: the session's first input; ``state``: ``running``, ``queued``, ``waiting_for_approval``,
    ``waiting_for_results``, ``uncertain``, ``failed`` with its ``error``, or ``idle``). See
    :mod:`rxagent.serve.session_list`.
``GET /api/sessions/{sid}``
    ``{"session_id", "head", "status": {"state", "running", "queued", "pending", "held_elsewhere",
    "position", "uncertain"}}``: ``head`` is the sequence number of the session's newest fact in the log;
    ``state`` is ``idle``, ``queued``, ``running``, ``waiting_for_approval``, ``waiting_for_results`` or
    ``uncertain``; ``running`` the id of the run going in this server, or ``null``; ``queued`` how many runs
    submitted here wait; ``pending`` the calls waiting, each the call's JSON (``id``, ``name``, ``input``,
    ``raw_arguments``, ``state``, …) plus ``kind`` (``ask``, ``external``, ``retry``) and ``reason``;
    ``held_elsewhere`` whether the next run waits for the session's lease, held by another server on the
    same database (whose run goes on there); ``position`` the place of the first run queued here in the
    session's line, which runs share across servers in the order they were submitted (``1``: it is next),
    or ``null``; ``uncertain`` the calls a stopped server left dispatched with no recorded result, whose
    tools are neither idempotent nor read-only (each the call's JSON): the session runs nothing until they
    are reconciled (``state`` is then ``uncertain``); ``queued_runs`` the runs waiting here, each
    ``{"run_id", "position", "input"}`` (``input``: its text, or the kind of input it is).
``DELETE /api/sessions/{sid}``
    ``200 {"session_id", "deleted": true}``: the session and its log are gone. ``409`` (``state``) while a
    run of it is going or queued, here or on another server of the same store.
``DELETE /api/sessions/{sid}/runs/{run_id}``
    ``200 {"run_id", "cancelled": true}``: a run queued here is cancelled before it starts. ``409``
    (``run_status``) for one that runs (interrupt it instead); ``404`` for one this server has not queued.
``GET /api/sessions/{sid}/turns``
    ``{"turns": [{"turn_id", "started", "input", "runs": [{"run_id", "started", "ended", "outcome",
    "reason", "error"}], "finished", "reason"}]}`` (see :mod:`rxagent.session.history`).
``GET /api/sessions/{sid}/messages``
    ``{"session_id", "messages": [{"id", "role", "name", "content": [{"type": "text", "text"}, …],
    "metadata", "created_at"}]}``: the conversation as the session's log has it (a running run's
    messages once it recorded them).
``DELETE /api/sessions/{sid}``
    ``200 {"session_id", "deleted": true}``: the session and its log are gone (its feed streams end; the
    id may be used again, for a new session). Refused ``409`` (``state``) while a run of it is going or
    queued, here or on another server of the same store: interrupt or cancel it first. A session
    waiting for answers, or with uncertain calls, is deleted (what may have happened is then nowhere).
``GET /api/sessions/{sid}/feed?after=N`` — SSE
    Every fact of the session after sequence number ``N`` (default 0: all of it), then each new one as it
    comes. One SSE event per fact::

        id: <seq>
        event: fact
        data: {"seq": <seq>, "kind": "<kind>", "run_id": "<run>"|null, "at": <seconds>, "data": <payload>}

    ``data`` is the fact's payload (:mod:`rxagent.session.facts`); for ``kind: "event"`` it is the run's
    event as :func:`rxagent.events.event_to_json` writes it (``type``, ``run_id``, ``seq``, ``time``, …).
    A ``Last-Event-ID`` header wins over ``after``: a client that reconnects resumes right after the last
    event it got, with no gap and no duplicate. Only facts the log holds are sent (a running run appends
    what it streams every 50 ms), so a number a client saw is the log's for good, even across a server
    killed, or one that lost the session to another; a position past the log's head is answered ``409``
    ``{"error", "head": N, "reconnect_from": N}``, never skipped silently. While
    nothing happens, a comment line ``: ping`` comes every 15 s (``ServeSettings.heartbeat``). Several
    facts that come together are written together (one write per wake of the feed, at most every 10 ms).
    A client that stops reading costs the server at most 128 KiB (its connection's buffer, up to the
    transport's 64 KiB high-water mark, and one write of about 16 KiB, more only for one larger fact;
    measured: about 105 KiB) and the system's send buffer (``send_buffer``); nothing of the log is kept
    for it, and when it reads again it catches up from the log (exactly, no gap). One that takes no data
    for 60 s (``send_timeout``) is dropped, its memory given back, and resumes with ``Last-Event-ID``.
    An ``event: gap`` (``data: {"first", "last"}``) would say facts were skipped; this server never skips.
    Disconnecting never affects a run.
``POST /api/sessions/{sid}/runs`` ``{"input": "text"}``
    ``202 {"run_id"}``: the run is queued behind the session's others; follow it on the feed, or read it
    (below). A W3C
    ``traceparent`` header joins the run to the caller's trace (its events carry that trace id; with
    :class:`rxagent.telemetry.Telemetry` on the agent, its spans are children of the caller's span); an
    invalid one is ignored. The same holds for ``respond`` and ``/ag-ui``.
``GET /api/sessions/{sid}/runs/{run_id}``
    ``{"run_id", "status", "position", "started", "ended", "reason", "error", "result", "usage"}``:
    ``status`` is ``queued`` (``position``: its place in the session's line, ``1``: next), ``running``,
    ``finished`` (``reason``: ``MODEL_STOP``, ``PERMISSION_ASKING``, …), ``failed`` (``error``),
    ``cancelled``, or ``unfinished`` (the log has its start and no end: it runs on another server of the
    same store, or its server stopped before it could record its end). ``started`` and ``ended`` are the
    sequence numbers of its first and last facts; ``result`` is its ``agent_result`` event (``message``,
    ``reason``, ``structured``, ``structured_error``, ``usage``, ``iterations``, ``pending``,
    ``detail``), ``null`` until it ended or when it never got that far; ``usage`` is the result's
    (``input_tokens``, ``output_tokens``, ``cache_read_tokens``, ``reasoning_tokens``, ``model_calls``).
    A run submitted here is known from its ``202`` on; one cancelled while queued never reaches the log,
    and this server answers for it while it keeps the session in memory (``404`` after).
``DELETE /api/sessions/{sid}/runs/{run_id}``
    ``200 {"run_id", "cancelled": true}``: a run queued on this server is cancelled before it starts.
    ``409`` (``run_status``) for one that runs (interrupt it instead) or has ended; ``404`` for a run this
    server has not queued (one queued on another server is cancelled there).
``POST /api/sessions/{sid}/steer`` ``{"message": "text"}``
    ``202 {}``: the message joins the running run at its next reasoning boundary; with no run going (or
    none reaching a boundary) it starts the next run.
``POST /api/sessions/{sid}/respond``
    ``{"decisions": [{"call_id", "allow": bool, "reason"?: str, "arguments"?: object, "always"?: bool}],
    "results": [{"call_id", "output": str, "status"?: "ok"|"error"}]}`` (at least one entry) →
    ``202 {"run_id"}``: a run carries on from the answers. ``arguments`` approves the call with edited
    arguments; ``always`` (with ``allow: true``) also allows the tool's later calls in this session without
    asking, a permission rule the session's log keeps (:mod:`rxagent.agent.grants`). Checked
    whole before anything changes (409 when it does not fit; see above). The 202 comes once the run
    holds the session and took the answers there (under its lease): an answer the log already has for
    a call is a 409, whoever gave it.
``POST /api/sessions/{sid}/reconcile``
    ``{"outcomes": [{"call_id", "outcome": "succeeded"|"failed"|"retry", "output"?: str}]}``: says what
    happened to uncertain calls of the session. ``succeeded``: it was done, ``output`` is its result
    for the model; ``failed``: it was not done and is not to be run (``output`` says why); ``retry``:
    not done, the run runs it again (no ``output``). Once none of ``status.uncertain`` is left, a run
    carries on from the outcomes: ``202 {"run_id"}``; while some are, ``200 {"run_id": null,
    "uncertain": [the calls left]}``. Checked whole before anything is recorded (400 a malformed entry;
    409 a call that is not uncertain, one given twice, or a run going or queued).
``POST /api/sessions/{sid}/interrupt`` (no body, or ``{}``)
    ``200 {"interrupted": bool}`` (``false``: no run was going). The run ends ``INTERRUPTED``, what it
    finished kept.

The harness
-----------
An agent made by :class:`rxagent.harness.Harness` (``rxagent serve --workspace DIR`` serves one) has more
to read:

``GET /api/sessions/{sid}/tasks``
    ``{"session_id", "tasks": [{"task_id", "agent", "instructions", "status", "user_id", "session_id",
    "attempt", "parent_run_id", "call_id", "run_id", "answer", "error", "usage", "collected",
    "position"}]}``: the session's background tasks in the order they started, as
    :class:`rxagent.harness.TaskInfo` says: ``status`` is ``queued`` (``position``: its place in line,
    ``1``: next), ``running``, ``finished`` (``answer``), ``failed``, ``cancelled`` or ``interrupted`` (its
    process stopped; ``error`` says why); ``usage`` (``input_tokens``, ``output_tokens``, …) is a task's
    that ended having run, else ``null``. ``[]`` when the agent has no background tasks.
A task's own session
    Each task's ``session_id`` is ``{sid}/tasks/{task_id}``. The endpoints that read a session (``GET``
    the session, its ``turns``, its ``feed``, its ``tasks``) serve it as any other, its ``/`` written
    ``%2F`` in the path (``/api/sessions/s1%2Ftasks%2Ftask_…/feed``). Every other one answers ``409``: its
    task alone drives it (``resume_task``, ``cancel_task``), since a run of this server's agent there
    would mix two agents in one conversation.
The todo list
    A session's todo list (``write_todos``) is kept in its extras: every change is an ``extras`` fact of
    the feed, whose ``data.extras.todos`` is the whole list, each item ``{"content", "status"}`` with
    ``status`` ``pending``, ``in_progress`` or ``completed`` (the run's ``todos_updated`` event says the
    same).

The dashboard
-------------
``GET /``
    A page (HTML; inline script and style only, under a hash-only ``Content-Security-Policy``) that reads
    and drives the API above: the sessions list, the conversation as it streams (Markdown), a trace of
    runs, steps, model and tool calls and nested runs, tokens per model call, approvals, interrupt, steer,
    new messages, replay from the log; and, for a harness's agent, the todo list and the background tasks,
    each with its status and a link to its session (shown read-only). ``GET /?token=<token>`` answers
    ``303`` to ``/`` and sets the token as an ``HttpOnly`` ``rxagent_token_<port>`` cookie, so the token
    leaves the address bar; without the token a browser gets a sign-in form (``401``). See
    :mod:`rxagent.serve.dashboard`.

The trace
---------
``GET /api/sessions/{sid}/requests/{seq}``
    The request of the model call whose ``model_call_started`` event is fact ``seq`` of the log (messages
    and tools; ``"source": "sent"`` as this server sent it, or ``"log"`` rebuilt from the log).
``GET /api/sessions/{sid}/state?at=N``
    The session's state as its log has it up to fact ``N``. See :mod:`rxagent.serve.trace`.

Front ends on other origins
---------------------------
With ``ServeSettings.allow_origins`` (``rxagent serve --allow-origin ORIGIN``, repeatable) pages of those
origins may call the server from the browser: their CORS preflights (``OPTIONS``) are answered ``204``
without the token, their requests pass the origin check (still with the token, as ``Authorization:
Bearer …``; no cookie across origins), and every answer to them carries ``Access-Control-Allow-Origin``.
A preflight from any other origin is answered ``403``. See :mod:`rxagent.serve.cors`.

AG-UI
-----
``POST /ag-ui`` with an AG-UI ``RunAgentInput`` (``threadId`` = session id) → SSE of AG-UI events built
from ``ag_ui.core`` types and written by ``ag_ui.encoder.EventEncoder``. Approvals and the agent's external
tools are AG-UI interrupts, answered by the next input's ``resume`` entries; uncertain calls are settled by
``resume`` entries too (``{"outcome": …}``, as for ``…/reconcile``). The input's ``tools`` are the front
end's own tools for that run (their calls come back in ``pendingToolCallIds``, their results as ``tool``
messages of the next input; a tool message for a call the thread does not wait on is a ``409``), its
``state`` the thread's shared state (sent back as ``STATE_SNAPSHOT`` and ``STATE_DELTA``), and a
``MESSAGES_SNAPSHOT`` corrects a client whose messages differ from the thread's. An input that brings
nothing new reruns the thread's last turn when it has no answer (its run failed), else it is ``409``. With
``ServeSettings.cancel_on_disconnect`` (or ``forwardedProps.cancelOnDisconnect``) a client that goes away
interrupts its run. See :mod:`rxagent.serve.agui` and :mod:`rxagent.serve.agui_thread` for the
mapping, the interrupt payloads and how the input is read. Input errors are answered before the stream
opens, as the table above says.

The Vercel AI SDK
-----------------
``POST /api/chat`` with ``useChat``'s body (``{"id", "messages": [UIMessage, …], "trigger"}``; ``id`` =
session id) → the AI SDK's UI message stream: SSE ``data:`` JSON chunks (``start``, ``start-step``,
``text-*``, ``reasoning-*``, ``tool-input-*``, ``tool-output-*``, ``tool-approval-request``,
``finish-step``, ``finish``, ``error``), then ``data: [DONE]``, with the header
``x-vercel-ai-ui-message-stream: v1``. ``/api/chat`` is ``useChat``'s default route. The last message is
the input: a user message (its text and file parts; sent twice, it runs once), or the assistant message
``useChat`` continues after ``addToolApprovalResponse`` or ``addToolOutput``, whose tool parts answer the
calls waiting (approvals are ``tool-approval-request`` chunks whose ``approvalId`` is the call's id). See
:mod:`rxagent.serve.vercel_ai` for the mapping and how the request is read. Input errors are answered
before the stream opens, as the table above says.

Health
------
``GET /healthz``
    ``200 {"status": "ok"}`` when the session store answers; ``503 {"status": "unavailable", "error"}``
    when it does not (within 5 s).
``GET /readyz``
    ``200 {"status": "ready"}`` when the server takes work; ``503`` with ``"status": "stopping"`` while it
    stops, or ``"unavailable"`` when its store does not answer.

Neither needs the token (a load balancer calls them without one); they say nothing else. See
:mod:`rxagent.serve.health`.

Security
--------
Binds 127.0.0.1 by default; any other host needs a token (the server refuses to start without one).
With a token every request carries it (``Authorization: Bearer <token>``; where a browser cannot set
headers, a ``token`` query parameter or an ``rxagent_token_<port>`` cookie). Changes from another origin are
refused; bodies are limited; no response, event or log line carries a secret (API keys, the token).
Behind a reverse proxy that ends TLS, ``trusted_proxies`` lists the proxies whose ``X-Forwarded-Proto``,
``X-Forwarded-Host`` and ``X-Forwarded-For`` count (from anyone else they are ignored). See
:mod:`rxagent.serve.security`.

Limits
------
A connection has ``header_timeout`` seconds (75) to send a whole request head, from when it opens or its
last answer ended (then it is closed, unanswered), and a request ``body_timeout`` seconds (30) to send its
body (408). At most ``max_connections`` (1000) are open at once. A session nothing uses (no run going or
queued, no request, no feed client) leaves the server's memory ``session_ttl`` seconds (600) after its
last use, within a quarter of that; its log keeps it, and the next request loads it again. A refused
request leaves nothing in memory. See :mod:`rxagent.serve.server` and :class:`ServeSettings`.

Stopping
--------
On SIGINT or SIGTERM ``rxagent serve`` stops taking connections, cancels queued runs and interrupts running
ones (they end ``INTERRUPTED`` and their sessions are saved; AG-UI clients get their ``RUN_FINISHED``, AI SDK
clients their ``finish``), ends the event streams, closes the connections and the session store.
"""

from __future__ import annotations

from rxagent.serve.server import AgentServer, create_app
from rxagent.serve.settings import ServeSettings, is_loopback

__all__ = ["AgentServer", "ServeSettings", "create_app", "is_loopback"]
