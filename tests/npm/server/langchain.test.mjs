// @langchain/openai's ChatOpenAI against `deltafin serve` on the demo model, over chat
// completions (its default) and over the Responses API (useResponsesApi): text and usage must be
// the chat completion's for the same conversation (greedy). Run by tests/e2e/server_openai.sh.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AIMessage, HumanMessage, SystemMessage, ToolMessage } from '@langchain/core/messages';
import { ChatOpenAI } from '@langchain/openai';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run tests/e2e/server_openai.sh)`);
  return v;
};
const baseURL = env('DELTAFIN_BASE_URL');
const apiKey = env('DELTAFIN_API_KEY');
const model = env('DELTAFIN_MODEL_ID');
const reference = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const maxTokens = 16;
const chatModel = (options = {}) => new ChatOpenAI({
  model, apiKey, configuration: { baseURL }, maxRetries: 0, maxTokens, ...options,
});

const conversation = [new SystemMessage('Answer briefly.'), new HumanMessage('Name a fruit.')];
const chatReference = () => reference.chat.completions.create({
  model,
  messages: [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'Name a fruit.' }],
  max_tokens: maxTokens,
  thinking: { type: 'disabled' },
});
// The demo model spends its first tokens reasoning; with thinking off all of them are text.
const apis = [
  ['chat completions', { modelKwargs: { thinking: { type: 'disabled' } } }],
  ['Responses API', { useResponsesApi: true, modelKwargs: { reasoning: { effort: 'none' } } }],
];
const textOf = (message) => (typeof message.content === 'string'
  ? message.content
  : message.content.filter((p) => p.type === 'text').map((p) => p.text).join(''));

for (const [name, options] of apis) {
  test(`ChatOpenAI over ${name}: invoke and stream equal the chat completion`, async () => {
    const chat = await chatReference();
    const want = chat.choices[0].message.content ?? '';
    assert.ok(want.length > 0);
    const llm = chatModel(options);
    const whole = await llm.invoke(conversation);
    assert.equal(textOf(whole), want);
    assert.equal(whole.usage_metadata.input_tokens, chat.usage.prompt_tokens);
    assert.equal(whole.usage_metadata.output_tokens, chat.usage.completion_tokens);
    if (options.useResponsesApi) assert.match(whole.id, /^(resp_|msg_)/);

    let text = '';
    let usage = null;
    for await (const chunk of await chatModel({ ...options, streamUsage: true }).stream(conversation)) {
      text += textOf(chunk);
      if (chunk.usage_metadata) usage = chunk.usage_metadata;
    }
    assert.equal(text, want);
    assert.ok(usage, 'the stream reported usage');
    assert.equal(usage.output_tokens, chat.usage.completion_tokens);
  });
}

test('ChatOpenAI: bound tools and a tool round trip render as the chat equivalent', async () => {
  const weather = {
    type: 'function',
    function: {
      name: 'get_weather', description: 'Current weather for a city.',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  };
  const chat = await reference.chat.completions.create({
    model,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant', content: '',
        tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_abc', content: '18C, clear' },
    ],
    tools: [weather],
    max_tokens: maxTokens,
    thinking: { type: 'disabled' },
  });
  assert.ok(chat.choices[0].message.content.length > 0);
  const messages = [
    new HumanMessage('Weather in Paris?'),
    new AIMessage({ content: '', tool_calls: [{ id: 'call_abc', name: 'get_weather', args: { city: 'Paris' } }] }),
    new ToolMessage({ tool_call_id: 'call_abc', content: '18C, clear' }),
  ];
  for (const [, options] of apis) {
    const result = await chatModel(options).bindTools([weather]).invoke(messages);
    assert.equal(result.usage_metadata.input_tokens, chat.usage.prompt_tokens, JSON.stringify(options));
    assert.equal(textOf(result), chat.choices[0].message.content ?? '');
    for (const call of result.tool_calls ?? []) assert.equal(call.name, 'get_weather');
  }
});
