// The Vercel AI SDK's own client code (the `ai` package from npm) against rxagent's /api/chat, for
// tests/serve/test_vercel_ai.py. It reads one JSON plan on stdin and writes one JSON report on stdout;
// the Python test asserts on the report.
//
// Three modes:
// - "read": each of `plan.texts` is sent as a new user message with DefaultChatTransport (the AI SDK
//   parses each SSE chunk and checks it against its chunk schema), and the chunks are read with
//   readUIMessageStream, which assembles the assistant message and reports every protocol error
//   (a delta for a part never started, a result for an unknown call, a chunk the schema refuses...).
//   Report: {"runs": [{"types": [chunk types], "chunks": [chunks], "message": UIMessage, "errors": [...]}]}.
// - "parse": each of `plan.bodies` (SSE text a translator wrote, no server) is parsed and read the same
//   way, starting from `plan.message` (the assistant message a continued stream goes on with), if any.
//   Report: {"runs": [...]} as for "read".
// - "chat": the core of useChat (AbstractChat, with a plain state object) sends `plan.text`; for each
//   approval request it answers `plan.approve` (addToolApprovalResponse), for each call of a tool named
//   in `plan.toolOutputs` it gives that output (addToolOutput, from onToolCall), and it sends again on
//   its own when the last message is complete with approvals or outputs (sendAutomaticallyWhen), as a
//   React app does. It waits for `plan.responses` responses. Report: {"messages", "errors", "finishes",
//   "bodies"} (the request bodies it sent).
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  readUIMessageStream,
} from 'ai';

async function read({ chatId, texts }) {
  const runs = [];
  const messages = [];
  for (const [index, text] of texts.entries()) {
    messages.push({ id: `${chatId}-user-${index}`, role: 'user', parts: [{ type: 'text', text }] });
    const run = { types: [], chunks: [], message: null, errors: [] };
    try {
      const stream = await transport.sendMessages({
        chatId,
        messages,
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: undefined,
      });
      await readChunks(stream, run);
    } catch (e) {
      run.errors.push(error(e));
    }
    if (run.message) messages.push(run.message);
    runs.push(run);
  }
  return { runs };
}

async function parse({ bodies, message }) {
  const runs = [];
  for (const body of bodies) {
    const run = { types: [], chunks: [], message: null, errors: [] };
    // the transport's own parsing of a response body: SSE, JSON, the chunk schema
    const stream = transport.processResponseStream(new Response(body).body);
    await readChunks(stream, run, message ?? undefined);
    runs.push(run);
  }
  return { runs };
}

async function readChunks(stream, run, message) {
  const [seen, parsed] = stream.tee();
  const collecting = collect(seen, run);
  const onError = e => run.errors.push(error(e));
  for await (const assembled of readUIMessageStream({ stream: parsed, message, onError })) {
    run.message = assembled;
  }
  await collecting;
}

async function collect(stream, run) {
  try {
    for await (const chunk of stream) {
      run.types.push(chunk.type);
      run.chunks.push(chunk);
    }
  } catch (e) {
    run.errors.push(error(e));
  }
}

async function chat({ chatId, text, approve, reason, toolOutputs = {}, responses = 1 }) {
  const errors = [];
  const finishes = [];
  let waiter = null;
  const state = new PlainState();
  const chat = new Chat({
    id: chatId,
    transport,
    state,
    onError: e => errors.push(error(e)),
    onFinish: ({ finishReason, isError, isAbort }) => {
      finishes.push({ finishReason: finishReason ?? null, isError, isAbort });
      if (waiter && finishes.length >= waiter.count) waiter.resolve();
    },
    onToolCall: ({ toolCall }) => {
      if (toolCall.toolName in toolOutputs) {
        // not awaited, as the AI SDK's docs ask (awaiting here would deadlock the chat)
        chat.addToolOutput({
          tool: toolCall.toolName,
          toolCallId: toolCall.toolCallId,
          output: toolOutputs[toolCall.toolName],
        });
      }
    },
    sendAutomaticallyWhen: ({ messages }) =>
      lastAssistantMessageIsCompleteWithApprovalResponses({ messages }) ||
      lastAssistantMessageIsCompleteWithToolCalls({ messages }),
  });
  const done = new Promise(resolve => (waiter = { count: responses, resolve }));
  await chat.sendMessage({ text });
  if (approve !== undefined && approve !== null) {
    const asked = chat.lastMessage.parts.filter(p => p.state === 'approval-requested');
    for (const part of asked) {
      await chat.addToolApprovalResponse({ id: part.approval.id, approved: approve, reason });
    }
  }
  const timeout = setTimeout(() => waiter.resolve(), (plan.timeoutSeconds ?? 10) * 1000);
  await done;
  clearTimeout(timeout);
  return { messages: state.messages, errors, finishes, status: chat.status };
}

class PlainState {
  status = 'ready';
  error = undefined;
  messages = [];
  pushMessage = message => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  };
  snapshot = thing => structuredClone(thing);
}

class Chat extends AbstractChat {}

// the plan runs once everything above is defined (classes are not hoisted)
const plan = JSON.parse(await readAll(process.stdin));
const bodies = [];
const transport = new DefaultChatTransport({
  api: plan.api,
  headers: plan.headers ?? {},
  // record what the client sends (the body useChat builds), then send it unchanged
  fetch: async (url, init) => {
    bodies.push(JSON.parse(init.body));
    return fetch(url, init);
  },
});

const modes = { read, parse, chat };
const report = await modes[plan.mode](plan);
process.stdout.write(JSON.stringify({ ...report, bodies }));

function error(e) {
  return { name: e?.name ?? 'Error', message: String(e?.message ?? e) };
}

async function readAll(input) {
  let text = '';
  for await (const chunk of input) text += chunk;
  return text;
}
