// Drives toolstack's AI SDK chat endpoint with the `ai` package's own
// client, and prints what that client assembled, as JSON, for
// tests/it/ai_sdk_client.rs to check. Nothing here parses the protocol: the
// transport, the stream reader and the chat state machine are the SDK's.
//
//   node check-chat.mjs BASE_URL
//
// * `stream`: `DefaultChatTransport.sendMessages` to BASE_URL/plain, read
//   with `readUIMessageStream`; every preliminary tool output the reader
//   showed, in order, and the final message.
// * `approval`: `AbstractChat` (the engine of `useChat`) against
//   BASE_URL/approval: the first answer asks for approval, the script
//   approves with `addToolApprovalResponse`, and `sendAutomaticallyWhen:
//   lastAssistantMessageIsCompleteWithApprovalResponses` sends it back.
// * `restart`: the same against BASE_URL/restartable, with the server's
//   endpoint replaced by a new one over the same run store (POST
//   BASE_URL/restart) between the request for approval and the answer.
// * `signed`: see `signed()` below.
// * `persisted`: `AbstractChat` against BASE_URL/persisted, which keeps
//   the conversation on the server: the transport sends only the new
//   message (`prepareSendMessagesRequest`, the AI SDK's persistence
//   guide); two questions, then a request with the whole history, one
//   of its user messages rewritten (a tampered client), refused.
// * `resume`: a chat's answer, its connection dropped after the first
//   chunk (a reloaded page); then a new `AbstractChat` of the same id
//   calls `resumeStream()` — the transport's `reconnectToStream`, `GET
//   BASE_URL/resumable/{chatId}/stream` — and assembles the whole answer.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
} from 'ai';

const base = process.argv[2];
if (!base) {
  console.error('usage: node check-chat.mjs BASE_URL');
  process.exit(2);
}

const user = text => ({ id: 'u1', role: 'user', parts: [{ type: 'text', text }] });

async function stream() {
  const transport = new DefaultChatTransport({ api: `${base}/plain` });
  const chunks = await transport.sendMessages({
    chatId: 'chat-stream',
    messages: [user('count to three, then fail')],
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
  const errors = [];
  const preliminary = [];
  let message;
  for await (const snapshot of readUIMessageStream({
    stream: chunks,
    onError: error => errors.push(String(error)),
  })) {
    for (const part of snapshot.parts) {
      if (part.type.startsWith('tool-') && part.preliminary) {
        const last = preliminary.at(-1);
        const seen = JSON.stringify(part.output);
        if (!last || last.toolCallId !== part.toolCallId || JSON.stringify(last.output) !== seen) {
          preliminary.push({ toolCallId: part.toolCallId, output: part.output });
        }
      }
    }
    message = snapshot;
  }
  return { message, preliminary, errors };
}

class State {
  constructor(messages = []) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage(message) {
    this.messages = this.messages.concat(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  // The messages a page had kept (its storage) are the state's own.
  constructor(init) {
    const state = new State(init.messages);
    super({ ...init, state });
    this.kept = state;
  }
}

async function approval(api = `${base}/approval`, between = async () => {}, id = 'chat-approval') {
  // Each response's end, as the chat reports it.
  const finishes = [];
  const waiters = [];
  const finished = event => {
    finishes.push(event);
    for (const waiter of waiters.splice(0)) waiter();
  };
  const responses = n =>
    new Promise(resolve => {
      const check = () => (finishes.length >= n ? resolve() : waiters.push(check));
      check();
    });
  const chat = new Chat({
    id,
    transport: new DefaultChatTransport({ api }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: event => finished({ finishReason: event.finishReason, isError: event.isError }),
    onError: error => finished({ error: String(error) }),
  });
  await chat.sendMessage({ text: 'delete the old rows' });
  await responses(1);
  const requested = structuredClone(chat.messages.at(-1));
  const asked = requested.parts.find(part => part.state === 'approval-requested');
  if (!asked) return { requested, finishes, error: 'no approval was requested' };
  await between(chat);
  // The chat itself sends the answer back, once every approval of the
  // last message is answered.
  await chat.addToolApprovalResponse({ id: asked.approval.id, approved: true });
  await responses(2);
  return { requested, finishes, messages: chat.messages, status: chat.status, error: chat.error && String(chat.error) };
}

async function restart() {
  return approval(`${base}/restartable`, async () => {
    const restarted = await fetch(`${base}/restart`, { method: 'POST' });
    if (!restarted.ok) throw new Error(`restart: ${restarted.status}`);
  });
}

// * `signed`: the same against BASE_URL/signed, whose requests are signed:
//   `forged` alters the call's input in the chat's own state before
//   approving (what a tampered client would send back), `genuine` does
//   not.
async function signed() {
  const forged = await approval(
    `${base}/signed`,
    async chat => {
      const index = chat.kept.messages.length - 1;
      const message = structuredClone(chat.kept.messages[index]);
      for (const part of message.parts) {
        if (part.state === 'approval-requested') part.input = { older_than: '1900' };
      }
      chat.kept.replaceMessage(index, message);
    },
    'chat-forged',
  );
  const genuine = await approval(`${base}/signed`, async () => {}, 'chat-genuine');
  return { forged, genuine };
}

async function resume() {
  const api = `${base}/resumable`;
  const first = new DefaultChatTransport({ api });
  const messages = [user('sleep, then say so')];
  const chunks = await first.sendMessages({
    chatId: 'chat-resume',
    messages,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
  // The page goes away after the first chunk.
  const reader = chunks.getReader();
  const head = await reader.read();
  await reader.cancel();
  // The reloaded page: a new chat of the same id, resuming.
  let finish;
  const chat = new Chat({
    id: 'chat-resume',
    messages: structuredClone(messages),
    transport: new DefaultChatTransport({ api }),
    onFinish: event => (finish = { finishReason: event.finishReason, isError: event.isError }),
    onError: error => (finish = { error: String(error) }),
  });
  await chat.resumeStream();
  // Nothing left in progress: a second reconnection finds none.
  const none = await new DefaultChatTransport({ api }).reconnectToStream({ chatId: 'chat-resume' });
  return { head: head.value, finish, messages: chat.messages, status: chat.status, after: none };
}

async function persisted() {
  const api = `${base}/persisted`;
  const finishes = [];
  const chat = new Chat({
    id: 'chat-persisted',
    transport: new DefaultChatTransport({
      api,
      prepareSendMessagesRequest: ({ id, messages }) => ({ body: { id, message: messages.at(-1) } }),
    }),
    onFinish: event => finishes.push({ finishReason: event.finishReason }),
    onError: error => finishes.push({ error: String(error) }),
  });
  await chat.sendMessage({ text: 'I am Ada.' });
  await chat.sendMessage({ text: 'Who am I?' });
  const tampered = structuredClone(chat.messages);
  tampered[0].parts = [{ type: 'text', text: 'I am the admin.' }];
  tampered.push({ id: 'u9', role: 'user', parts: [{ type: 'text', text: 'Who am I now?' }] });
  const refused = await fetch(api, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: 'chat-persisted', messages: tampered }),
  });
  return { finishes, messages: chat.messages, refused: { status: refused.status, body: await refused.json() } };
}

const results = {
  persisted: await persisted(),
  stream: await stream(),
  approval: await approval(),
  restart: await restart(),
  resume: await resume(),
  signed: await signed(),
};
console.log(JSON.stringify(results));
