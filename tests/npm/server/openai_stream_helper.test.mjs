// What the openai SDK's chat.completions.stream() helper makes of reasoning_content, which
// docs/SERVER.md warns about: its accumulator (lib/ChatCompletionStream.js,
// #accumulateChatCompletion) appends `content` and `refusal` but Object.assign()s every other
// delta field, so the final message keeps only the last reasoning fragment. If an SDK update
// changes this, this test fails and the warning must go. Run by tests/e2e/server_openai.sh.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run tests/e2e/server_openai.sh)`);
  return v;
};
const model = env('DELTAFIN_MODEL_ID');
const client = new OpenAI({
  baseURL: env('DELTAFIN_BASE_URL'), apiKey: env('DELTAFIN_API_KEY'), maxRetries: 0, timeout: 60_000,
});

test('chat.completions.stream() keeps only the last reasoning_content fragment', async () => {
  const request = { model, messages: [{ role: 'user', content: 'Why is the sky blue?' }], max_tokens: 24 };
  const whole = await client.chat.completions.create(request);
  const fragments = [];
  const stream = client.chat.completions.stream(request);
  for await (const chunk of stream) {
    const piece = chunk.choices[0]?.delta?.reasoning_content;
    if (piece) fragments.push(piece);
  }
  const final = await stream.finalChatCompletion();
  assert.ok(fragments.length > 1, 'the reasoning came in several fragments');
  assert.equal(fragments.join(''), whole.choices[0].message.reasoning_content);
  assert.equal(final.choices[0].message.reasoning_content, fragments.at(-1));
  assert.notEqual(final.choices[0].message.reasoning_content, whole.choices[0].message.reasoning_content);
});
