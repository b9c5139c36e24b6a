// Two `deltafin serve` instances on one model, one with speculation off and one forced to verify
// drafted ids on every pass, must answer the official openai SDK's requests identically: text,
// reasoning, tool calls and finish reasons, whole and streamed, greedy and seeded.
// usage: node same_output.mjs OFF_BASE_URL ON_BASE_URL MODEL_ID
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [offUrl, onUrl, model] = process.argv.slice(2);
const clients = [offUrl, onUrl].map((baseURL) => new OpenAI({ baseURL, apiKey: 'unused' }));

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

const requests = [
  { messages: [{ role: 'user', content: 'Tell me a story about a lighthouse.' }], max_tokens: 48 },
  { messages: [{ role: 'user', content: 'Count: one two three one two three' }], max_tokens: 40,
    temperature: 0.8, seed: 11 },
  { messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: 'auto',
    max_tokens: 40 },
  { messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 32, stop: ['e '] },
];

async function whole(client, request) {
  const r = await client.chat.completions.create({ model, ...request });
  const c = r.choices[0];
  return { content: c.message.content, reasoning: c.message.reasoning_content ?? null,
           tools: c.message.tool_calls ?? [], finish: c.finish_reason,
           tokens: r.usage.completion_tokens };
}

async function streamed(client, request) {
  const out = { content: '', reasoning: '', tools: [], finish: null };
  const stream = await client.chat.completions.create({ model, ...request, stream: true });
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    out.content += choice.delta.content ?? '';
    out.reasoning += choice.delta.reasoning_content ?? '';
    if (choice.delta.tool_calls) out.tools.push(...choice.delta.tool_calls);
    if (choice.finish_reason) out.finish = choice.finish_reason;
  }
  return out;
}

// Tool call ids are random per response: compare names and arguments.
const strip = (r) => ({ ...r, tools: r.tools.map((t) => [t.function?.name, t.function?.arguments]) });

let compared = 0;
for (const request of requests) {
  for (const call of [whole, streamed]) {
    const [off, on] = await Promise.all(clients.map((c) => call(c, request)));
    assert.deepEqual(strip(on), strip(off), `${call.name} ${JSON.stringify(request.messages)}`);
    assert.ok((off.content ?? '').length + (off.reasoning ?? '').length > 0, 'some text came back');
    compared++;
  }
}
console.log(`same_output: ${compared} responses identical with speculation off and on`);
