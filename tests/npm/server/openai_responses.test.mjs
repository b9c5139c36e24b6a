// The official openai SDK's Responses API (responses.create, whole and streamed, and the
// responses.stream() helper) against `deltafin serve` on the demo model: the text, reasoning and
// usage must be the chat completion's for the same conversation (greedy), input items must
// render as their chat equivalents, and refusals must be SDK errors. Run by
// tests/e2e/server_openai.sh.
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

const textOf = (response) => response.output
  .filter((item) => item.type === 'message')
  .flatMap((item) => item.content.map((part) => part.text)).join('');
const reasoningOf = (response) => response.output
  .filter((item) => item.type === 'reasoning')
  .flatMap((item) => (item.content ?? []).map((part) => part.text)).join('');

async function failure(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail('the request succeeded');
}

const tools = [{
  type: 'function',
  name: 'get_weather',
  description: 'Current weather for a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
}];
const chatTools = tools.map(({ type, name, description, parameters }) => ({
  type, function: { name, description, parameters },
}));

test('responses.create: text, reasoning and usage equal the chat completion', async () => {
  const chat = await client.chat.completions.create({
    model,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'What is 2+2?' }],
    max_tokens: 24,
    reasoning_effort: 'high',
  });
  const response = await client.responses.create({
    model, instructions: 'Be brief.', input: 'What is 2+2?', max_output_tokens: 24,
    reasoning: { effort: 'high' },
  });
  assert.equal(response.object, 'response');
  assert.match(response.id, /^resp_/);
  const message = chat.choices[0].message;
  assert.equal(response.output_text, message.content ?? '');
  assert.equal(textOf(response), message.content ?? '');
  assert.equal(reasoningOf(response), message.reasoning_content);
  assert.equal(response.status, chat.choices[0].finish_reason === 'length' ? 'incomplete' : 'completed');
  assert.equal(response.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(response.usage.output_tokens, chat.usage.completion_tokens);
  assert.equal(response.usage.total_tokens, chat.usage.total_tokens);
  assert.equal(response.usage.output_tokens_details.reasoning_tokens,
    chat.usage.completion_tokens_details.reasoning_tokens);
  assert.equal(response.instructions, 'Be brief.');
  assert.equal(response.max_output_tokens, 24);
  assert.ok(message.reasoning_content.length > 0, 'the demo model reasons first');

  // Without reasoning (effort none = thinking off), all output is text.
  const plainChat = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'What is 2+2?' }], max_tokens: 24, thinking: { type: 'disabled' },
  });
  const plain = await client.responses.create({
    model, input: 'What is 2+2?', max_output_tokens: 24, reasoning: { effort: 'none' },
  });
  assert.ok(plain.output_text.length > 0);
  assert.equal(plain.output_text, plainChat.choices[0].message.content);
  assert.deepEqual(plain.output.map((item) => item.type), ['message']);
  assert.equal(plain.usage.input_tokens, plainChat.usage.prompt_tokens);
  assert.equal(plain.usage.output_tokens_details.reasoning_tokens, 0);
});

for (const effort of ['none', 'high']) test(`responses.create streamed (reasoning ${effort}): typed events add up to the whole response`, async () => {
  const request = { model, input: 'Tell me a story.', max_output_tokens: 20, reasoning: { effort } };
  const whole = await client.responses.create(request);
  const stream = await client.responses.create({ ...request, stream: true });
  const types = [];
  let text = '';
  let reasoning = '';
  let final = null;
  let sequence = 0;
  for await (const event of stream) {
    types.push(event.type);
    assert.equal(event.sequence_number, sequence++);
    if (event.type === 'response.output_text.delta') text += event.delta;
    if (event.type === 'response.reasoning_text.delta') reasoning += event.delta;
    if (event.type === 'response.completed' || event.type === 'response.incomplete') final = event.response;
  }
  assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.ok(types.includes('response.output_item.added'));
  assert.ok(types.includes('response.content_part.added'));
  assert.ok(final, 'the stream ended with response.completed or response.incomplete');
  assert.equal(text, textOf(whole));
  assert.equal(reasoning, reasoningOf(whole));
  assert.ok((effort === 'none' ? text : reasoning).length > 0);
  assert.equal(textOf(final), textOf(whole));
  assert.deepEqual(final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(final.status, whole.status);

  // The SDK's stream helper accumulates the same response.
  const helper = client.responses.stream(request);
  const deltas = [];
  helper.on('response.output_text.delta', (e) => deltas.push(e.delta));
  const accumulated = await helper.finalResponse();
  assert.equal(accumulated.output_text, whole.output_text);
  assert.equal(deltas.join(''), whole.output_text);
});

test('input items render as the equivalent chat messages (same prompt, same text)', async () => {
  const call = { type: 'function_call', call_id: 'call_abc', name: 'get_weather', arguments: '{"city":"Paris"}' };
  const response = await client.responses.create({
    model,
    input: [
      { role: 'developer', content: 'Use the tools.' },
      { role: 'user', content: [{ type: 'input_text', text: 'Weather in ' }, { type: 'input_text', text: 'Paris?' }] },
      { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'Look it up.' }] },
      call,
      { type: 'function_call_output', call_id: 'call_abc', output: '18C, clear' },
    ],
    tools,
    max_output_tokens: 12,
    reasoning: { effort: 'none' },
  });
  const chat = await client.chat.completions.create({
    model,
    messages: [
      { role: 'system', content: 'Use the tools.' },
      { role: 'user', content: [{ type: 'text', text: 'Weather in ' }, { type: 'text', text: 'Paris?' }] },
      {
        role: 'assistant', content: null, reasoning_content: 'Look it up.',
        tool_calls: [{ id: 'call_abc', type: 'function', function: { name: call.name, arguments: call.arguments } }],
      },
      { role: 'tool', tool_call_id: 'call_abc', content: '18C, clear' },
    ],
    tools: chatTools,
    max_tokens: 12,
    thinking: { type: 'disabled' },
  });
  assert.equal(response.usage.input_tokens, chat.usage.prompt_tokens);
  assert.ok(response.output_text.length > 0);
  assert.equal(response.output_text, chat.choices[0].message.content ?? '');
  // Calls the model makes, if any, come as function_call items with parseable ids and names.
  for (const item of response.output.filter((i) => i.type === 'function_call')) {
    assert.match(item.call_id, /^call_/);
    assert.equal(item.name, 'get_weather');
    assert.equal(typeof item.arguments, 'string');
  }
});

test('a response sent back continues from the kept state (all of it is reused)', async () => {
  const reasoning = { effort: 'none' };
  const first = await client.responses.create({ model, input: 'Hi', max_output_tokens: 10, reasoning });
  assert.ok(first.output_text.length > 0);
  const second = await client.responses.create({
    model,
    input: [{ role: 'user', content: 'Hi' }, ...first.output, { role: 'user', content: 'And then?' }],
    max_output_tokens: 4,
    reasoning,
  });
  // The output items render back to the very ids the model ran: prompt and completion are reused.
  assert.ok(second.usage.input_tokens_details.cached_tokens >= first.usage.total_tokens - 1,
    `cached ${second.usage.input_tokens_details.cached_tokens} of ${first.usage.total_tokens}`);
});

test('refusals are SDK errors naming the parameter', async () => {
  let e = await failure(client.responses.create({ model, input: 'x', frobnicate: true }));
  assert.ok(e instanceof OpenAI.BadRequestError);
  assert.equal(e.param, 'frobnicate');
  assert.equal(e.code, 'unknown_parameter');
  e = await failure(client.responses.create({ model, input: 'x', previous_response_id: 'resp_x' }));
  assert.ok(e instanceof OpenAI.BadRequestError);
  assert.equal(e.param, 'previous_response_id');
  e = await failure(client.responses.create({ model, input: 'x', store: true }));
  assert.equal(e.param, 'store');
  e = await failure(client.responses.create({ model, input: 'x', tools: [{ type: 'web_search' }] }));
  assert.equal(e.param, 'tools[0].type');
  e = await failure(client.responses.create({ model: 'gpt-5', input: 'x' }));
  assert.ok(e instanceof OpenAI.NotFoundError);
  e = await failure(client.responses.create({ model, input: 'x', max_output_tokens: 10_000_000 }));
  assert.equal(e.param, 'max_output_tokens');
});
