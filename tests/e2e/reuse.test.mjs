// KV reuse across requests (R-KV-1..3, docs/kv-cache.md): follow-up turns, a shared system
// prompt across conversations (prefix copy, the donor stays warm), interleaved conversations with
// --kv-slots 2, and cached_tokens in every dialect, streamed and not, and in the request log line.
// Expected counts come from the two prompts the server renders (tests/e2e/kv.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './harness.mjs';
import { DIALECTS, body, expectedCached, loggedCached, systemPrompt, tokens, turn } from './kv.mjs';

const SYS = systemPrompt('alpha');

for (const stream of [false, true]) {
  test(`a follow-up turn reuses the previous turn's rows in every dialect (${stream ? 'stream' : 'create'})`, async () => {
    const srv = await startServer([]);
    const seen = [];
    try {
      for (const d of DIALECTS) {
        const t1 = [{ role: 'user', content: `First question in ${d}` }];
        const a = await turn(srv, d, body(d, SYS, t1, 6), stream);
        const t2 = [...t1, { role: 'assistant', content: a.text }, { role: 'user', content: 'And a second one' }];
        const b = await turn(srv, d, body(d, SYS, t2, 6), stream);
        const want = expectedCached(a.promptText, b.promptText);
        assert.ok(want > tokens(SYS).length, `the follow-up shares more than the system prompt (${want})`);
        assert.equal(b.cached, want, `${d}: cached_tokens of the follow-up`);
        assert.equal(b.prompt, tokens(b.promptText).length, `${d}: prompt tokens`);
        if (d === 'messages') assert.equal(b.input, b.prompt - b.cached, 'Anthropic input_tokens excludes cache reads');
        // the same request again: every prompt token but the last is cached
        const c = await turn(srv, d, body(d, SYS, t2, 6), stream);
        assert.equal(c.cached, c.prompt - 1);
        assert.equal(c.text, b.text, 'greedy: the same request gives the same reply from a warm slot');
        seen.push(a.cached, b.cached, c.cached);
      }
    } finally {
      assert.equal((await srv.stop()).code, 0);
    }
    // the request log line carries the same counts (read once the server has exited)
    const logged = loggedCached(srv.log());
    assert.deepEqual(logged, seen, 'log line cached= equals the usage field');
    assert.deepEqual(logged.filter((_, i) => i % 3 === 0).map((x) => x > 0), [false, true, true],
      'first turns: cold for the first dialect, then the system prompt is shared');
  });
}

test('two conversations sharing a long system prompt: the second copies the prefix, the first stays warm (--kv-slots 2)', async () => {
  const srv = await startServer(['--kv-slots', '2', '--log-level', 'debug']); // debug: the kv plan line
  try {
    const a1t = [{ role: 'user', content: 'Conversation A asks about the weather' }];
    const a1 = await turn(srv, 'chat', body('chat', SYS, a1t, 6));
    assert.equal(a1.cached, 0);
    const b1t = [{ role: 'user', content: 'Conversation B wants a poem' }];
    const b1 = await turn(srv, 'chat', body('chat', SYS, b1t, 6));
    const shared = expectedCached(a1.promptText, b1.promptText);
    assert.ok(shared >= tokens(SYS).length, `B reuses at least the system prompt (${shared})`);
    assert.equal(b1.cached, shared);
    assert.match(srv.log(), /kv: copy -> slot 1 \(copied\)/);
    // A's follow-up: its own slot was left intact by B's copy
    const a2t = [...a1t, { role: 'assistant', content: a1.text }, { role: 'user', content: 'Tomorrow?' }];
    const a2 = await turn(srv, 'chat', body('chat', SYS, a2t, 6));
    assert.equal(a2.cached, expectedCached(a1.promptText, a2.promptText));
    assert.ok(a2.cached > b1.cached, 'A keeps its own dialogue, not only the shared prefix');
    const b2t = [...b1t, { role: 'assistant', content: b1.text }, { role: 'user', content: 'Shorter' }];
    const b2 = await turn(srv, 'messages', body('messages', SYS, b2t, 6));
    assert.equal(b2.cached, expectedCached(b1.promptText, b2.promptText));
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
});

test('interleaved conversations with --kv-slots 2 both stay warm; with one slot they evict each other', async () => {
  for (const slots of [2, 1]) {
    const srv = await startServer(['--kv-slots', String(slots), '--batch', '1']);
    try {
      const conv = { A: { sys: systemPrompt('red'), turns: [], prev: null }, B: { sys: systemPrompt('blue'), turns: [], prev: null } };
      const cached = [];
      for (let round = 0; round < 3; round++) {
        for (const k of ['A', 'B']) {
          const c = conv[k];
          c.turns.push({ role: 'user', content: `${k} round ${round}` });
          const r = await turn(srv, 'responses', body('responses', c.sys, c.turns, 5));
          if (c.prev && slots === 2) assert.equal(r.cached, expectedCached(c.prev, r.promptText), `${k} round ${round}`);
          cached.push(r.cached);
          c.turns.push({ role: 'assistant', content: r.text });
          c.prev = r.promptText;
        }
      }
      if (slots === 1) {
        // each conversation finds the other one's rows: only the template head is common (below the gate)
        assert.deepEqual(cached, [0, 0, 0, 0, 0, 0]);
      } else {
        assert.deepEqual(cached.slice(0, 2), [0, 0]);
        assert.ok(cached.slice(2).every((x) => x > 0));
      }
    } finally {
      assert.equal((await srv.stop()).code, 0);
    }
  }
});
