// Drives toolstack's AI SDK chat endpoint with the `ai` package's own
// client, and prints what that client assembled, as JSON, for
// tests/ai_sdk_client.rs to check. Nothing here parses the protocol: the
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
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
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
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

async function approval() {
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
    id: 'chat-approval',
    transport: new DefaultChatTransport({ api: `${base}/approval` }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: event => finished({ finishReason: event.finishReason, isError: event.isError }),
    onError: error => finished({ error: String(error) }),
  });
  await chat.sendMessage({ text: 'delete the old rows' });
  await responses(1);
  const requested = structuredClone(chat.messages.at(-1));
  const asked = requested.parts.find(part => part.state === 'approval-requested');
  if (!asked) return { requested, finishes, error: 'no approval was requested' };
  // The chat itself sends the answer back, once every approval of the
  // last message is answered.
  await chat.addToolApprovalResponse({ id: asked.approval.id, approved: true });
  await responses(2);
  return { requested, finishes, messages: chat.messages, status: chat.status, error: chat.error && String(chat.error) };
}

const results = { stream: await stream(), approval: await approval() };
console.log(JSON.stringify(results));
