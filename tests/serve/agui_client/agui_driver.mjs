// Drives rxagent's AG-UI endpoint with the official @ag-ui/client, as a front end would, on a test's orders.
//
// The test writes one JSON command per line on stdin; the driver answers each with one JSON line on stdout:
//   {"op": "agent", "url", "threadId", "headers"?, "state"?}   a new HttpAgent (the previous one is dropped)
//   {"op": "run", "tools"?, "forwardedProps"?, "resume"?, "abortOn"?}
//       runAgent(); with abortOn (an event type) abortRun() as the first such event arrives. Answers with
//       what the client saw: its events, its messages and state afterwards (as the client keeps them),
//       the run's outcome, and the error runAgent() ended with (AG-UI's own checks of the event sequence
//       raise there: a protocol error is an error here).
//   {"op": "addMessage", "message"}                            agent.addMessage(message)
//   {"op": "setState", "state"}                                agent.setState(state)
//   {"op": "exit"}
// Everything the client says through console.warn or console.error (a patch it could not apply, a message it
// could not find) is collected and sent with the next answer as "warnings": a test expects none.
import { createInterface } from "node:readline";

import { HttpAgent } from "@ag-ui/client";

const warnings = [];
for (const level of ["warn", "error"]) {
  console[level] = (...parts) =>
    warnings.push(parts.map((p) => (typeof p === "string" ? p : JSON.stringify(p))).join(" "));
}

let agent = null;

async function run(command) {
  const events = [];
  let finished = null;
  let failed = null;
  const subscriber = {
    onEvent({ event }) {
      events.push(event);
      if (command.abortOn && event.type === command.abortOn && !agent.abortController.signal.aborted) {
        agent.abortRun();
      }
    },
    onRunFinishedEvent(params) {
      finished = { outcome: params.outcome, result: params.result ?? null };
      if (params.outcome === "success") finished.pendingToolCallIds = params.pendingToolCallIds ?? [];
      if (params.outcome === "interrupt") finished.interrupts = params.interrupts;
    },
    onRunErrorEvent({ event }) {
      failed = { message: event.message, code: event.code ?? null };
    },
  };
  const parameters = {};
  for (const key of ["tools", "forwardedProps", "resume"]) {
    if (command[key] !== undefined) parameters[key] = command[key];
  }
  let error = null;
  try {
    await agent.runAgent(parameters, subscriber);
  } catch (thrown) {
    error = { name: thrown?.name ?? null, message: String(thrown?.message ?? thrown), status: thrown?.status ?? null };
    if (thrown?.payload !== undefined) error.payload = thrown.payload;
  }
  return {
    events,
    finished,
    runError: failed,
    error,
    aborted: agent.abortController.signal.aborted,
    messages: agent.messages,
    state: agent.state,
  };
}

async function handle(command) {
  switch (command.op) {
    case "agent":
      agent = new HttpAgent({
        url: command.url,
        threadId: command.threadId,
        headers: command.headers ?? {},
        initialState: command.state ?? {},
      });
      return { ok: true };
    case "run":
      return run(command);
    case "addMessage":
      agent.addMessage(command.message);
      return { ok: true, messages: agent.messages };
    case "setState":
      agent.setState(command.state);
      return { ok: true, state: agent.state };
    case "exit":
      return { ok: true };
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  let answer;
  try {
    answer = await handle(command);
  } catch (thrown) {
    answer = { driverError: String(thrown?.stack ?? thrown) };
  }
  answer.warnings = warnings.splice(0);
  process.stdout.write(`${JSON.stringify(answer)}\n`);
  if (command.op === "exit") break;
}
