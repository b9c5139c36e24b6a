// The official openai SDK against a live `deltafin serve` on the demo model (random weights, so
// the tests check shapes, consistency and exactness, never the words). Started by
// tests/e2e/server_openai.sh, which passes the server and the model through the environment:
//   DELTAFIN_BASE_URL, DELTAFIN_API_KEY, DELTAFIN_MODEL_ID, DELTAFIN_BIN, DELTAFIN_MODEL_DIR
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run tests/e2e/server_openai.sh)`);
  return v;
};
const baseURL = env('DELTAFIN_BASE_URL');
const model = env('DELTAFIN_MODEL_ID');
const client = new OpenAI({ baseURL, apiKey: env('DELTAFIN_API_KEY'), maxRetries: 0, timeout: 60_000 });
const user = (content) => [{ role: 'user', content }];

// Everything a stream says, put together.
async function collect(stream) {
  const out = { reasoning: '', content: '', finish: null, usage: null, chunks: 0, tools: [] };
  for await (const chunk of stream) {
    out.chunks++;
    if (chunk.usage) out.usage = chunk.usage;
    for (const choice of chunk.choices) {
      const d = choice.delta ?? {};
      if (d.reasoning_content) out.reasoning += d.reasoning_content;
      if (d.content) out.content += d.content;
      if (d.tool_calls) out.tools.push(...d.tool_calls);
      if (choice.text) out.content += choice.text;
      if (choice.finish_reason) out.finish = choice.finish_reason;
    }
  }
  return out;
}

// The error a request raises (it must raise one).
async function failure(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail('the request succeeded');
}

test('models.list names the served model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
  assert.equal((await client.models.retrieve(model)).id, model);
});

test('chat: whole and streamed responses agree, with reasoning_content and usage', async () => {
  const request = { model, messages: user('What is 2+2?'), max_tokens: 24, reasoning_effort: 'high' };
  const whole = await client.chat.completions.create(request);
  assert.equal(whole.object, 'chat.completion');
  const choice = whole.choices[0];
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.reasoning_content, 'string');
  assert.ok(['stop', 'length', 'tool_calls'].includes(choice.finish_reason));
  const u = whole.usage;
  assert.ok(u.prompt_tokens > 0);
  assert.ok(u.completion_tokens > 0 && u.completion_tokens <= 24);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.ok(u.completion_tokens_details.reasoning_tokens <= u.completion_tokens);

  const streamed = await collect(await client.chat.completions.create({
    ...request, stream: true, stream_options: { include_usage: true },
  }));
  assert.equal(streamed.reasoning, choice.message.reasoning_content);
  assert.equal(streamed.content, choice.message.content ?? '');
  assert.equal(streamed.finish, choice.finish_reason);
  assert.equal(streamed.usage.completion_tokens, u.completion_tokens);
  assert.equal(streamed.usage.prompt_tokens, u.prompt_tokens);

  // Without thinking there is no reasoning channel at all.
  const plain = await client.chat.completions.create({
    model, messages: user('Hi'), max_tokens: 8, thinking: { type: 'disabled' },
  });
  assert.equal(plain.choices[0].message.reasoning_content, undefined);
  assert.equal(plain.usage.completion_tokens_details.reasoning_tokens, 0);
});

test('completions: whole and streamed agree; echo; usage in the stream only when asked', async () => {
  const request = { model, prompt: 'The capital of France is', max_tokens: 20 };
  const whole = await client.completions.create(request);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 20);
  const streamed = await collect(await client.completions.create({ ...request, stream: true }));
  assert.equal(streamed.content, whole.choices[0].text);
  assert.equal(streamed.usage, null);
  const echoed = await client.completions.create({ ...request, echo: true });
  assert.equal(echoed.choices[0].text, request.prompt + whole.choices[0].text);
});

test('seeded sampling repeats exactly; another seed differs', async () => {
  const ask = (seed, tag) => client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 32, temperature: 0.9, top_p: 0.95, top_k: 40, seed,
    user: tag, // makes the bodies differ, so the memo cannot answer and the model runs each time
  });
  const a = await ask(1234, 'a');
  const b = await ask(1234, 'b');
  assert.equal(a.choices[0].text, b.choices[0].text);
  const c = await ask(99, 'c');
  assert.notEqual(c.choices[0].text, a.choices[0].text);
  // Greedy (the default) is reproducible too.
  const g1 = await client.chat.completions.create({ model, messages: user('x'), max_tokens: 12, user: '1' });
  const g2 = await client.chat.completions.create({ model, messages: user('x'), max_tokens: 12, user: '2' });
  assert.deepEqual(g1.choices[0].message, g2.choices[0].message);
});

test('stop strings end the text before the match, streamed or not', async () => {
  const request = { model, prompt: 'Tell me a story.', max_tokens: 40 };
  const full = (await client.completions.create(request)).choices[0].text;
  const chars = [...full];
  assert.ok(chars.length > 10, 'the continuation is long enough to cut');
  const stop = chars.slice(Math.floor(chars.length / 2), Math.floor(chars.length / 2) + 2).join('');
  const want = full.slice(0, full.indexOf(stop));
  const cut = await client.completions.create({ ...request, stop: [stop] });
  assert.equal(cut.choices[0].text, want);
  assert.equal(cut.choices[0].finish_reason, 'stop');
  const streamed = await collect(await client.completions.create({ ...request, stop, stream: true }));
  assert.equal(streamed.content, want);
  assert.equal(streamed.finish, 'stop');
});

test('tool calls: a round trip renders as the K3 encoder does', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather for a city.',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];
  const first = await client.chat.completions.create({
    model, messages: user('Weather in Paris?'), tools, tool_choice: 'auto', max_tokens: 16,
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(first.choices[0].finish_reason));
  // The client answers a call: the assistant turn with its tool_calls, then the tool's result.
  const messages = [
    ...user('Weather in Paris?'),
    {
      role: 'assistant', content: null, reasoning_content: 'I should look it up.',
      tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
    },
    { role: 'tool', tool_call_id: 'call_abc', content: '18C, clear' },
  ];
  const second = await client.chat.completions.create({ model, messages, tools, max_tokens: 4 });
  // The server's prompt is exactly what `deltafin render-chat` makes of the same conversation.
  const dir = mkdtempSync(join(tmpdir(), 'deltafin-tools-'));
  const input = join(dir, 'input.json');
  writeFileSync(input, JSON.stringify({ messages: messages.map((m) => ({ ...m, content: m.content ?? '' })), tools }));
  const modelDir = env('DELTAFIN_MODEL_DIR');
  const ids = JSON.parse(execFileSync(env('DELTAFIN_BIN'), [
    'render-chat', '--input', input, '--vocab', join(modelDir, 'tiktoken.model'),
    '--special-config', join(modelDir, 'tokenizer_config.json'),
  ], { encoding: 'utf8' }));
  assert.equal(second.usage.prompt_tokens, ids.length);
  // Tool-call shapes in the stream, when the model produces any, carry index, id and name.
  const streamed = await collect(await client.chat.completions.create({
    model, messages: user('Weather?'), tools, max_tokens: 16, stream: true,
  }));
  for (const call of streamed.tools) {
    assert.equal(typeof call.index, 'number');
    assert.match(call.id, /^call_/);
    assert.equal(call.type, 'function');
  }
});

test('errors arrive as the SDK error classes with the right status', async () => {
  let e = await failure(client.chat.completions.create({ model, messages: user('x'), n: 2 }));
  assert.ok(e instanceof OpenAI.BadRequestError);
  assert.equal(e.status, 400);
  assert.equal(e.error.param, 'n');
  e = await failure(client.chat.completions.create({ model, messages: user('x'), logprobs: true }));
  assert.ok(e instanceof OpenAI.BadRequestError);
  assert.equal(e.param, 'logprobs');
  e = await failure(client.chat.completions.create({ model, messages: user('x'), reasoning_effort: 'medium' }));
  assert.ok(e instanceof OpenAI.BadRequestError);
  e = await failure(client.chat.completions.create({ model, messages: user('x'), max_tokens: 10_000_000 }));
  assert.ok(e instanceof OpenAI.BadRequestError);
  assert.equal(e.param, 'max_tokens');
  e = await failure(client.chat.completions.create({ model, messages: user('x'), frequency_penalty: 1 }));
  assert.ok(e instanceof OpenAI.BadRequestError);
  e = await failure(client.chat.completions.create({ model: 'gpt-4o', messages: user('x') }));
  assert.ok(e instanceof OpenAI.NotFoundError);
  assert.equal(e.code, 'model_not_found');
  const stranger = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  e = await failure(stranger.models.list());
  assert.ok(e instanceof OpenAI.AuthenticationError);
  assert.equal(e.status, 401);
  e = await failure(client.chat.completions.create({ model, messages: user('x'.repeat(300_000)) }));
  assert.ok(e instanceof OpenAI.APIError);
  assert.equal(e.status, 413);
});

test('a second generation gets RateLimitError while one runs; aborting frees the server', async () => {
  const controller = new AbortController();
  const long = await client.completions.create(
    { model, prompt: 'Count:', max_tokens: 30_000, stream: true },
    { signal: controller.signal },
  );
  const iterator = long[Symbol.asyncIterator]();
  await iterator.next(); // the generation is running
  const e = await failure(client.completions.create({ model, prompt: 'other', max_tokens: 4 }));
  assert.ok(e instanceof OpenAI.RateLimitError);
  assert.equal(e.status, 429);
  // Other endpoints keep answering meanwhile.
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
  controller.abort();
  await iterator.next().catch(() => {});
  // The server notices the hang-up within a token; the next request runs.
  let ok = null;
  for (let i = 0; i < 50 && !ok; i++) {
    ok = await client.completions.create({ model, prompt: 'after', max_tokens: 2 })
      .catch((err) => {
        if (!(err instanceof OpenAI.RateLimitError)) throw err;
        return new Promise((r) => setTimeout(() => r(null), 100));
      });
  }
  assert.ok(ok, 'the server stayed busy after the client left');
  assert.equal(ok.usage.completion_tokens, 2);
});
