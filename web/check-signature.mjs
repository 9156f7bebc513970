// Checks toolstack's approval signatures with the AI SDK's own server-side
// verification: for each case, `generateText` is given a conversation in
// which the case's tool call was asked about (its `tool-approval-request`
// carrying the MAC toolstack made) and approved, with
// `experimental_toolApprovalSecret` set. The SDK verifies the signature
// before it runs the tool: the tool runs only if it matches.
//
//   node check-signature.mjs '{"secret": "...", "cases": [...]}'
//
// Prints, per case, `ran` or the error's name, as JSON.
import { generateText, jsonSchema, tool } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';

const { secret, cases } = JSON.parse(process.argv[2]);
const results = [];
for (const { approvalId, toolCallId, toolName, input, signature } of cases) {
  let ran = false;
  const tools = {
    [toolName]: tool({
      inputSchema: jsonSchema({ type: 'object' }),
      needsApproval: true,
      execute: async () => {
        ran = true;
        return 'done';
      },
    }),
  };
  const model = new MockLanguageModelV4({
    doGenerate: async () => ({
      content: [{ type: 'text', text: 'ok' }],
      finishReason: { unified: 'stop', raw: 'stop' },
      usage: {
        inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 1, text: 1, reasoning: 0 },
      },
      warnings: [],
    }),
  });
  const messages = [
    { role: 'user', content: 'go' },
    {
      role: 'assistant',
      content: [
        { type: 'tool-call', toolCallId, toolName, input },
        { type: 'tool-approval-request', approvalId, toolCallId, signature },
      ],
    },
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId, approved: true }] },
  ];
  try {
    await generateText({ model, tools, messages, experimental_toolApprovalSecret: secret });
    results.push(ran ? 'ran' : 'not run');
  } catch (error) {
    results.push(error?.name ?? String(error));
  }
}
console.log(JSON.stringify(results));
