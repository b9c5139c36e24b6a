// The Vercel `ai` SDK against `deltafin serve` on the demo model, with both of its OpenAI
// providers: @ai-sdk/openai (whose default model speaks the Responses API) and
// @ai-sdk/openai-compatible (chat completions). Text, reasoning and usage must be what the chat
// endpoint returns for the same conversation (greedy). Run by tests/e2e/server_openai.sh.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, jsonSchema, streamText, tool } from 'ai';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run tests/e2e/server_openai.sh)`);
  return v;
};
const baseURL = env('DELTAFIN_BASE_URL');
const apiKey = env('DELTAFIN_API_KEY');
const modelId = env('DELTAFIN_MODEL_ID');
const reference = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const responsesModel = createOpenAI({ baseURL, apiKey })(modelId);
const compatibleModel = createOpenAICompatible({ name: 'deltafin', baseURL, apiKey, includeUsage: true })
  .chatModel(modelId);

const system = 'Answer briefly.';
const prompt = 'Name a color.';
const maxOutputTokens = 16;
// The demo model spends its first tokens reasoning; with thinking off all of them are text.
// @ai-sdk/openai sends reasoning.effort only for models it takes for reasoning models.
const noThinking = {
  openai: { forceReasoning: true, reasoningEffort: 'none' },
  deltafin: { thinking: { type: 'disabled' } },
};

async function chatReference(thinking = false) {
  return reference.chat.completions.create({
    model: modelId,
    messages: [{ role: 'system', content: system }, { role: 'user', content: prompt }],
    max_tokens: maxOutputTokens,
    thinking: { type: thinking ? 'enabled' : 'disabled' },
  });
}

const weatherTool = tool({
  description: 'Current weather for a city.',
  inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }),
});

test('@ai-sdk/openai (Responses API): generateText and streamText equal the chat completion', async () => {
  const chat = await chatReference();
  const want = chat.choices[0].message.content ?? '';
  assert.ok(want.length > 0);
  const args = { model: responsesModel, system, prompt, maxOutputTokens, maxRetries: 0, providerOptions: noThinking };
  const whole = await generateText(args);
  assert.equal(whole.response.id.startsWith('resp_'), true, 'the request went to /v1/responses');
  assert.equal(whole.text, want);
  assert.equal(whole.usage.inputTokens, chat.usage.prompt_tokens);
  assert.equal(whole.usage.outputTokens, chat.usage.completion_tokens);
  assert.equal(whole.finishReason, chat.choices[0].finish_reason === 'length' ? 'length' : 'stop');

  const streamed = streamText(args);
  let text = '';
  for await (const delta of streamed.textStream) text += delta;
  assert.equal(text, want);
  const usage = await streamed.usage;
  assert.equal(usage.inputTokens, chat.usage.prompt_tokens);
  assert.equal(usage.outputTokens, chat.usage.completion_tokens);

  // With reasoning on, the text is still the chat completion's (the SDK shows reasoning only
  // from summaries, which this server does not make).
  const thinking = await chatReference(true);
  const reasoned = await generateText({ model: responsesModel, system, prompt, maxOutputTokens, maxRetries: 0 });
  assert.equal(reasoned.text, thinking.choices[0].message.content ?? '');
  assert.equal(reasoned.usage.outputTokens, thinking.usage.completion_tokens);
  assert.equal(reasoned.usage.outputTokenDetails?.reasoningTokens ?? reasoned.usage.reasoningTokens,
    thinking.usage.completion_tokens_details.reasoning_tokens);
});

test('@ai-sdk/openai-compatible (chat completions): text, reasoning and usage', async () => {
  for (const thinking of [false, true]) {
    const chat = await chatReference(thinking);
    const message = chat.choices[0].message;
    assert.ok((thinking ? message.reasoning_content : message.content).length > 0);
    const args = {
      model: compatibleModel, system, prompt, maxOutputTokens, maxRetries: 0,
      providerOptions: thinking ? {} : noThinking,
    };
    const whole = await generateText(args);
    assert.match(whole.response.id, /^chatcmpl-/);
    assert.equal(whole.text, message.content ?? '');
    assert.equal(whole.reasoningText ?? '', message.reasoning_content ?? '');
    assert.equal(whole.usage.inputTokens, chat.usage.prompt_tokens);
    assert.equal(whole.usage.outputTokens, chat.usage.completion_tokens);

    const streamed = streamText(args);
    let text = '';
    for await (const delta of streamed.textStream) text += delta;
    assert.equal(text, message.content ?? '');
    assert.equal((await streamed.reasoningText) ?? '', message.reasoning_content ?? '');
    assert.equal((await streamed.usage).outputTokens, chat.usage.completion_tokens);
  }
});

// A tool round trip in the SDK's own message types: both providers must send a conversation that
// renders to the same prompt as the chat request written by hand.
test('tool calls and results from the ai SDK render as the chat equivalent', async () => {
  const messages = [
    { role: 'user', content: 'Weather in Paris?' },
    {
      role: 'assistant',
      content: [{ type: 'tool-call', toolCallId: 'call_abc', toolName: 'get_weather', input: { city: 'Paris' } }],
    },
    {
      role: 'tool',
      content: [{
        type: 'tool-result', toolCallId: 'call_abc', toolName: 'get_weather',
        output: { type: 'text', value: '18C, clear' },
      }],
    },
  ];
  const chat = await reference.chat.completions.create({
    model: modelId,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant', content: '',
        tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_abc', content: '18C, clear' },
    ],
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather', description: 'Current weather for a city.',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    }],
    max_tokens: 8,
    thinking: { type: 'disabled' },
  });
  assert.ok(chat.choices[0].message.content.length > 0);
  for (const model of [responsesModel, compatibleModel]) {
    const result = await generateText({
      model, messages, tools: { get_weather: weatherTool }, maxOutputTokens: 8, maxRetries: 0,
      providerOptions: noThinking,
    });
    assert.equal(result.usage.inputTokens, chat.usage.prompt_tokens, model.provider);
    assert.equal(result.text, chat.choices[0].message.content ?? '', model.provider);
    for (const call of result.toolCalls) {
      assert.equal(call.toolName, 'get_weather');
      assert.match(call.toolCallId, /^call_/);
    }
  }
});

// The SDK's usual multi-turn flow: the previous result's messages appended. With store unset it
// would send them as item_references (refused: nothing is stored), so store: false.
test('@ai-sdk/openai: a conversation continues with store: false', async () => {
  const messages = [{ role: 'user', content: prompt }];
  const args = { model: responsesModel, maxOutputTokens: 8, maxRetries: 0, providerOptions: { openai: { store: false } } };
  const first = await generateText({ ...args, messages });
  messages.push(...first.response.messages, { role: 'user', content: 'And another?' });
  const second = await generateText({ ...args, messages });
  assert.ok(second.usage.inputTokens > first.usage.inputTokens + 2);
  await assert.rejects(generateText({ ...args, messages, providerOptions: {} }),
    (e) => e.statusCode === 400 && /item references/.test(e.message));
});

test('a refusal reaches the ai SDK as an API error with the server message', async () => {
  await assert.rejects(
    generateText({
      model: responsesModel, prompt, maxRetries: 0,
      providerOptions: { openai: { previousResponseId: 'resp_none' } },
    }),
    (e) => e.statusCode === 400 && /previous_response_id|stored responses/.test(e.message),
  );
});
