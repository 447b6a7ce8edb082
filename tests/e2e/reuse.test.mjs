// --prefix-reuse: a follow-up keeps the shared KV rows and reports them in each dialect's usage.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, USER } from './harness.mjs';

test('cached tokens are reported per dialect (R-KV-3 fields)', async () => {
  const srv = await startServer(['--prefix-reuse']);
  try {
    const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
    const a = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 3 });
    assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0, 'cold cache');
    const b = await oai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 3 });
    // every prompt row but the last (which must run again for its logits)
    assert.equal(b.usage.prompt_tokens_details.cached_tokens, b.usage.prompt_tokens - 1);
    const r = await oai.responses.create({ model: 'm', input: USER, max_output_tokens: 3 });
    assert.equal(r.usage.input_tokens_details.cached_tokens, r.usage.input_tokens - 1);
    const m = await ant.messages.create({ model: 'm', messages: USER, max_tokens: 3 });
    assert.equal(m.usage.cache_read_input_tokens, b.usage.prompt_tokens - 1);
    assert.equal(m.usage.input_tokens, 1, 'Anthropic input_tokens excludes cache reads');
    // a different conversation sharing only the template head reuses just that head
    const c = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Something else' }], max_tokens: 1 });
    assert.ok(c.usage.prompt_tokens_details.cached_tokens < c.usage.prompt_tokens - 1);
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
});
