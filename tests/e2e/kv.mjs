// Helpers of the KV-reuse tests (docs/kv-cache.md): one conversation turn in any dialect, streamed
// or not, through the official SDKs, returning its reply text and its usage; the token ids of the
// prompt the server renders (/apply-template, tokenized by lmserve-tokenize, the server's own
// tokenizer) so that the expected cached_tokens are computed from the two prompts, not assumed.
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { MODEL } from './harness.mjs';

import path from 'node:path';
const TOKENIZE = path.join(path.dirname(MODEL), '..', 'lmserve-tokenize'); // the build that made MODEL
export const GREEDY = { temperature: 0 };
export const DIALECTS = ['chat', 'responses', 'messages'];

// A system prompt of a few hundred tokens: several prefill chunks at small --prefill-chunk.
export function systemPrompt(tag, words = 120) {
  const w = [];
  for (let i = 0; i < words; i++) w.push(`${tag}${i % 17} rule ${i}`);
  return `You are assistant ${tag}. Follow these rules: ${w.join(', ')}.`;
}

export function tokens(text, model = MODEL) {
  const out = execFileSync(TOKENIZE, [model, '--special'], { input: text }).toString().trim();
  return out ? out.split(',').map(Number) : [];
}

export function lcp(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

// turns: [{ role: 'user' | 'assistant', content }]; the dialect's body for that history.
export function body(dialect, system, turns, maxTokens) {
  if (dialect === 'chat') return { model: 'm', messages: [{ role: 'system', content: system }, ...turns], max_tokens: maxTokens, ...GREEDY };
  if (dialect === 'responses') return { model: 'm', instructions: system, input: turns, max_output_tokens: maxTokens, ...GREEDY };
  return { model: 'm', system, messages: turns, max_tokens: maxTokens, ...GREEDY };
}

export async function render(srv, dialect, b) {
  const r = await fetch(`${srv.url}/apply-template?dialect=${dialect}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b),
  });
  if (r.status !== 200) throw new Error(`apply-template ${r.status}: ${await r.text()}`);
  return (await r.json()).prompt;
}

// One turn: { text, prompt, cached, promptText } (prompt = prompt tokens as the usage reports them).
export async function turn(srv, dialect, b, stream = false) {
  const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
  const promptText = await render(srv, dialect, b);
  if (dialect === 'chat') {
    if (!stream) {
      const r = await oai.chat.completions.create(b);
      return { text: r.choices[0].message.content, prompt: r.usage.prompt_tokens, cached: r.usage.prompt_tokens_details.cached_tokens, promptText };
    }
    let text = '', usage = null;
    for await (const c of await oai.chat.completions.create({ ...b, stream: true, stream_options: { include_usage: true } })) {
      if (c.choices[0]?.delta?.content) text += c.choices[0].delta.content;
      if (c.usage) usage = c.usage;
    }
    return { text, prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details.cached_tokens, promptText };
  }
  if (dialect === 'responses') {
    if (!stream) {
      const r = await oai.responses.create(b);
      return { text: r.output_text, prompt: r.usage.input_tokens, cached: r.usage.input_tokens_details.cached_tokens, promptText };
    }
    // the terminal event carries the usage (response.incomplete at max_output_tokens)
    let text = '', usage = null;
    for await (const ev of await oai.responses.create({ ...b, stream: true })) {
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') usage = ev.response.usage;
    }
    return { text, prompt: usage.input_tokens, cached: usage.input_tokens_details.cached_tokens, promptText };
  }
  const m = stream ? await ant.messages.stream(b).finalMessage() : await ant.messages.create(b);
  const text = m.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
  // Anthropic counts cache reads apart: input_tokens is what was not read from the cache
  return { text, prompt: m.usage.input_tokens + m.usage.cache_read_input_tokens, cached: m.usage.cache_read_input_tokens, input: m.usage.input_tokens, promptText };
}

// What a slot that ran `prev` (prompt + reply) can give a request rendering `next`: the common
// prefix of the two prompts when they diverge inside the previous prompt (Qwen3's template drops
// the empty think block of past turns), never the last token of `next` (recomputed for its logits).
export function expectedCached(prevPromptText, nextPromptText) {
  const a = tokens(prevPromptText), b = tokens(nextPromptText);
  const l = lcp(a, b);
  if (l >= a.length) throw new Error('the next prompt contains the whole previous prompt: reply tokens decide');
  return Math.min(l, b.length - 1);
}

// The cached count of the request log line of the n-th request whose path matches.
export function loggedCached(log) {
  return [...log.matchAll(/ POST \/v1\/\S+ 200 prompt=(\d+) completion=\d+ cached=(\d+)/g)].map((m) => Number(m[2]));
}
