// End-to-end test of the real RWKV Studio binary through tauri-driver (W3C WebDriver, plain
// fetch calls). Run by scripts/e2e.sh, which builds the app, prepares the files the native
// dialogs return (RWKV_STUDIO_E2E_*), and starts tauri-driver under Xvfb.
//
// Env: E2E_APP (the binary), E2E_DRIVER (default http://127.0.0.1:4444),
//      E2E_SCREENSHOTS (folder for PNGs), E2E_DOWNLOAD_FILE (the model file the local
//      download server serves), E2E_USER_CATALOG (where the app reads the user's catalog),
//      E2E_LIBRARY (the app's library folder), E2E_SMOKE=1 (only the smoke steps: the
//      bundled model loads on first start and a chat replies — the installed app's check
//      in scripts/package_test.sh, which has no test hooks or prepared files).

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { startModelServer } from './model_server.mjs';

const DRIVER = process.env.E2E_DRIVER ?? 'http://127.0.0.1:4444';
const APP = process.env.E2E_APP;
const SHOTS = process.env.E2E_SCREENSHOTS ?? 'artifacts/screenshots';
if (!APP) throw new Error('E2E_APP (path of the built rwkv-studio binary) is not set');
mkdirSync(SHOTS, { recursive: true });

const ELEMENT = 'element-6066-11e4-a52e-4f735466cecf';
let session = '';
const t0 = Date.now();
let passed = 0;
let failed = 0;

function log(msg) {
  console.log(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${msg}`);
}

async function wd(method, path, body, timeoutMs = 120_000) {
  const res = await fetch(`${DRIVER}${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    // A WebDriver call that never answers fails, named, instead of hanging the run.
    signal: AbortSignal.timeout(timeoutMs),
  });
  const json = await res.json().catch(() => ({}));
  if (!res.ok) {
    const v = json.value ?? {};
    const err = new Error(`${method} ${path}: ${res.status} ${v.error ?? ''} ${v.message ?? ''}`);
    err.wdError = v.error;
    throw err;
  }
  return json.value;
}

const s = (path) => `/session/${session}${path}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function findAll(css) {
  const els = await wd('POST', s('/elements'), { using: 'css selector', value: css });
  return els.map((e) => e[ELEMENT]);
}

async function find(css) {
  const els = await findAll(css);
  if (!els.length) throw new Error(`no element matches ${css}`);
  return els[0];
}

/** Runs `fn` in the page (a function body as a string) with `args`. */
async function exec(script, ...args) {
  return wd('POST', s('/execute/sync'), { script, args });
}

async function click(css) {
  // Scrolled into view and clicked by the page itself: reliable across WebKit versions.
  const id = await find(css);
  await wd('POST', s(`/element/${id}/click`), {});
}

async function type(css, text, { clear = true } = {}) {
  const id = await find(css);
  if (clear) await wd('POST', s(`/element/${id}/clear`), {});
  await wd('POST', s(`/element/${id}/value`), { text });
}

/** Sets an input's value and fires `change` (for number inputs and textareas bound on change). */
async function setValue(css, value) {
  await exec(
    `const el = document.querySelector(arguments[0]);
     el.value = arguments[1];
     el.dispatchEvent(new Event('input', { bubbles: true }));
     el.dispatchEvent(new Event('change', { bubbles: true }));`,
    css,
    value,
  );
}

/** Changes a chat setting and waits until the backend has stored it. */
async function setSetting(css, value) {
  await setValue(css, value);
  await sleep(600);
}

async function text(css) {
  return exec(`const el = document.querySelector(arguments[0]); return el ? el.textContent : null;`, css);
}

async function waitFor(what, fn, timeoutMs = 60_000, everyMs = 150) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last})`);
}

async function screenshot(name) {
  const png = await wd('GET', s('/screenshot'));
  const path = join(SHOTS, `${name}.png`);
  writeFileSync(path, Buffer.from(png, 'base64'));
  log(`screenshot ${path}`);
}

function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}

/** Most one step may take (its own waits are shorter): a hang fails the step, named. */
const STEP_TIMEOUT_MS = Number(process.env.E2E_STEP_TIMEOUT_MS ?? 600_000);

/** The steps E2E_SMOKE=1 runs: a first start of an installed app. */
const SMOKE = process.env.E2E_SMOKE === '1';
const SMOKE_STEPS = new Set(['the bundled model loads on first start', 'chat: a message streams a reply with tok/s']);

async function step(name, fn) {
  if (SMOKE && !SMOKE_STEPS.has(name)) {
    log(`- ${name} (not a smoke step)`);
    return;
  }
  log(`▶ ${name}`);
  let timer;
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`step timed out after ${STEP_TIMEOUT_MS / 1000} s`)),
          STEP_TIMEOUT_MS,
        );
      }),
    ]);
    clearTimeout(timer);
    passed++;
    log(`✔ ${name}`);
  } catch (e) {
    clearTimeout(timer);
    failed++;
    log(`✘ ${name}: ${e.stack ?? e}`);
    await screenshot(`failed-${name.replace(/\W+/g, '-')}`).catch(() => {});
    throw e;
  }
}

/** The assistant messages' texts and stats, in order. */
async function replies() {
  return exec(`return [...document.querySelectorAll('[data-testid=msg-assistant]')].map(m => ({
    text: m.querySelector('[data-testid=msg-text]')?.textContent ?? '',
    stats: m.querySelector('[data-testid=reply-stats]')?.textContent ?? null,
    streaming: m.dataset.streaming === 'true',
  }))`);
}

/** Starts the app (a new WebDriver session). */
async function startApp() {
  const caps = { 'tauri:options': { application: APP } };
  const created = await wd('POST', '/session', { capabilities: { alwaysMatch: caps, firstMatch: [{}] } });
  session = created.sessionId;
  log(`session ${session}`);
}

/** The pids of the app under test: processes whose executable is E2E_APP. */
function appPids() {
  const exe = realpathSync(APP);
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return readlinkSync(`/proc/${d}/exe`) === exe;
      } catch {
        return false;
      }
    })
    .map(Number);
}

async function main() {
  await startApp();

  await step('a damaged stored chat is set aside and named, and the app starts', async () => {
    const banner = await waitFor('the set-aside notice', () =>
      findAll('[data-testid=set-aside]').then((e) => (e.length > 0 ? text('[data-testid=set-aside]') : null)),
    );
    assert(banner.includes('chats/00ff.json') && banner.includes('set-aside'), `the notice names the file (got ${banner})`);
    await click('[data-testid=set-aside] button');
  });

  await step('the bundled model loads on first start', async () => {
    await waitFor('the model view', () => findAll('[data-testid=view-model]').then((e) => e.length > 0));
    const status = await waitFor(
      'the model to load',
      async () => {
        const t = await text('[data-testid=model-status]');
        return t && t.includes('rwkv7-demo') ? t : null;
      },
      600_000,
      500,
    );
    log(`status: ${status.trim().replace(/\s+/g, ' ')}`);
    const layers = await text('[data-testid=card-layers]');
    assert(layers.trim() === '6', `model card shows 6 layers (got ${layers})`);
    const about = (await text('[data-testid=about]')).trim().replace(/\s+/g, ' ');
    log(`about: ${about}`);
    assert(/RWKV Studio \d+\.\d+\.\d+ · commit [0-9a-f]{12} · GPU: \S/.test(about), `version, commit and GPU shown (got ${about})`);
    await screenshot('1-model');
  });

  await step('chat: a message streams a reply with tok/s', async () => {
    await click('[data-testid=nav-chat]');
    await waitFor('the chat input', () => findAll('[data-testid=chat-input]:not([disabled])').then((e) => e.length > 0));
    // A short reply first: the demo model writes prose; the RWKV template stops at a blank line.
    await setSetting('[data-testid=set-max-tokens]', '48');
    await type('[data-testid=chat-input]', 'It was a dark and stormy night, and the ship');
    await click('[data-testid=send]');
    // Streamed text appears before the reply is done.
    await waitFor('streamed text', async () => {
      const r = await replies();
      return r.length && r[r.length - 1].text.trim().length > 0;
    }, 300_000, 50);
    const stats = await waitFor('the stats line', async () => {
      const r = await replies();
      return r.length && r[r.length - 1].stats;
    }, 300_000);
    log(`reply stats: ${stats}`);
    assert(/tok\/s/.test(stats) && /first token/.test(stats), 'stats line has tok/s and time to first token');
  });

  await step('chat: a long generation stops at once', async () => {
    await setSetting('[data-testid=set-max-tokens]', '4000');
    await setSetting('[data-testid=set-stops]', '');
    const before = (await replies()).length;
    await type('[data-testid=chat-input]', 'Tell me the whole story of the voyage, chapter by chapter.');
    await click('[data-testid=send]');
    // Let it run for a while (several tokens streamed), then stop it.
    await waitFor('a few streamed tokens', async () => {
      const r = await replies();
      return r.length > before && r[r.length - 1].streaming && r[r.length - 1].text.trim().length > 30;
    }, 300_000, 50);
    const tStop = Date.now();
    await click('[data-testid=stop]');
    const stats = await waitFor('the stopped reply', async () => {
      const r = await replies();
      return r.length > before && r[r.length - 1].stats;
    }, 60_000, 50);
    const stopMs = Date.now() - tStop;
    log(`stopped after ${stopMs} ms: ${stats}`);
    assert(/stopped/.test(stats), 'the reply says it was stopped');
    assert(stopMs < 5_000, `Stop takes effect at once (${stopMs} ms)`);
    const n = Number(stats.match(/^(\d+) tok/)?.[1]);
    assert(n > 1 && n < 4000, `stopped well before max tokens (${n})`);
    const text = (await replies()).at(-1).text;
    await sleep(1_000);
    assert((await replies()).at(-1).text === text, 'no text arrives after the stop');
  });

  await step('chat: regenerate replaces the last reply', async () => {
    await setSetting('[data-testid=set-max-tokens]', '32');
    await setSetting('[data-testid=set-stops]', '\\n\\n');
    const before = await replies();
    const buttons = await findAll('[data-testid=regenerate]');
    await wd('POST', s(`/element/${buttons[buttons.length - 1]}/click`), {});
    await waitFor('the regenerated reply', async () => {
      const r = await replies();
      const last = r[r.length - 1];
      return r.length === before.length && last.stats && !/stopped/.test(last.stats) ? last : null;
    }, 300_000);
    const after = await replies();
    assert(after.length === before.length, 'same number of replies after regenerate');
    const users = await findAll('[data-testid=msg-user]');
    assert(users.length === after.length, 'one user message per reply');
    await screenshot('2-chat');
  });

  await step('chat: "Reply as JSON (schema)" gives JSON that fits the schema', async () => {
    const schema = {
      type: 'object',
      properties: { mood: { enum: ['calm', 'stormy'] }, wind: { type: 'integer', minimum: 0, maximum: 12 } },
      required: ['mood', 'wind'],
      additionalProperties: false,
    };
    await setSetting('[data-testid=set-max-tokens]', '48');
    await setValue('[data-testid=json-reply-schema]', JSON.stringify(schema));
    await click('[data-testid=json-reply-toggle]');
    await sleep(600);
    const before = (await replies()).length;
    await type('[data-testid=chat-input]', 'How is the sea tonight?');
    await click('[data-testid=send]');
    const reply = await waitFor('the JSON reply', async () => {
      const r = await replies();
      return r.length > before && r[r.length - 1].stats ? r[r.length - 1] : null;
    }, 300_000);
    log(`JSON reply: ${reply.text}`);
    const v = JSON.parse(reply.text.trim());
    assert(['calm', 'stormy'].includes(v.mood) && Number.isInteger(v.wind) && v.wind >= 0 && v.wind <= 12,
      `the reply fits the schema: ${reply.text}`);
    assert(Object.keys(v).length === 2, 'no other properties');
    await screenshot('12-chat-json');
    await click('[data-testid=json-reply-toggle]'); // back to free text for what follows
    await sleep(600);
  });

  await step('documents: a text file becomes a named state', async () => {
    await click('[data-testid=nav-documents]');
    await click('[data-testid=doc-open-file]');
    await waitFor('the file text', async () => (await exec(`return document.querySelector('[data-testid=doc-text]').value`)).length > 0);
    const name = await exec(`return document.querySelector('[data-testid=doc-name]').value`);
    assert(name.length > 0, 'the name comes from the file name');
    await click('[data-testid=doc-create]');
    const notice = await waitFor('the prefill result', () => text('[data-testid=doc-notice]'), 300_000);
    log(`document: ${notice}`);
    assert(/tokens in .* tok\/s/.test(notice), 'tokens, time and speed are shown');
    const rows = await findAll('[data-testid=doc-row]');
    assert(rows.length >= 1, 'the document is listed');
    await screenshot('3-documents');
  });

  await step('documents: "Extract fields as JSON" fills a schema from the state', async () => {
    const schema = {
      type: 'object',
      properties: { title: { type: 'string', maxLength: 40 }, people: { type: 'array', items: { type: 'string', maxLength: 24 }, maxItems: 3 } },
      required: ['title', 'people'],
      additionalProperties: false,
    };
    const buttons = await findAll('[data-testid=doc-extract]');
    await wd('POST', s(`/element/${buttons[0]}/click`), {});
    await setValue('[data-testid=extract-schema]', JSON.stringify(schema));
    await click('[data-testid=extract-run]');
    const out = await waitFor('the extracted JSON', () => text('[data-testid=extract-result]'), 300_000);
    const status = await text('[data-testid=extract-status]');
    log(`extracted: ${out} (${status})`);
    assert(/^Complete/.test(status), `the extraction completed: ${status}`);
    const v = JSON.parse(out);
    assert(typeof v.title === 'string' && v.title.length <= 40, 'title is a short string');
    assert(Array.isArray(v.people) && v.people.length <= 3 && v.people.every((p) => typeof p === 'string'), 'people is a list of names');
    await screenshot('13-extract-json');
  });

  await step('fields: 3 fields against the document give a 3×3 heatmap', async () => {
    await click('[data-testid=nav-fields]');
    await waitFor('the document option', () => exec(`return document.querySelector('[data-testid=fields-document]').options.length > 1`));
    await exec(`const s = document.querySelector('[data-testid=fields-document]');
                s.selectedIndex = 1; s.dispatchEvent(new Event('change', { bubbles: true }));`);
    const nFields = (await findAll('[data-testid=field-row]')).length;
    assert(nFields === 3, `three fields (got ${nFields})`);
    await click('[data-testid=fields-run]');
    const values = await waitFor('the heatmap', async () => {
      const v = await exec(`return [...document.querySelectorAll('[data-testid=heat-cell]')].map(c => Number(c.dataset.value))`);
      return v.length === 9 ? v : null;
    }, 300_000);
    log(`similarities: ${values.map((v) => v.toFixed(3)).join(' ')}`);
    for (let i = 0; i < 3; i++) {
      assert(Math.abs(values[i * 3 + i] - 1) < 1e-4, `diagonal ${i} is 1`);
      for (let j = 0; j < 3; j++) {
        const v = values[i * 3 + j];
        assert(Number.isFinite(v) && v >= -1.0001 && v <= 1.0001, `cell ${i},${j} is a cosine`);
        assert(Math.abs(v - values[j * 3 + i]) < 1e-5, `symmetric at ${i},${j}`);
      }
    }
    assert(values.some((v, k) => k % 4 !== 0 && Math.abs(v - 1) > 1e-3), 'different fields differ');
    const timings = await text('[data-testid=fields-timings]');
    assert(/ms/.test(timings), 'timings shown');
    await screenshot('4-fields');
  });

  await step('adapters: a LoRA and an initial state load, and a chat runs with them', async () => {
    await click('[data-testid=nav-model]');
    // The dialogs answer through RWKV_STUDIO_E2E_OPEN_LORA / _INIT_STATE (tests/e2e/adapters/).
    await click('[data-testid=add-lora]');
    const lora = await waitFor('the LoRA row', async () => {
      const r = await exec(`const row = document.querySelector('[data-testid=lora-row]');
        return row && [...row.querySelectorAll('td')].map(td => td.textContent.trim()).concat(row.querySelector('[data-testid=lora-scale]').value);`);
      return r && r.length ? r : null;
    }, 120_000);
    log(`LoRA: ${lora.join(' | ')}`);
    assert(lora[1] === 'demo-lora-r4.safetensors', `the file is listed (got ${lora[1]})`);
    const cells = await exec(`return ['rank', 'targets', 'layers'].map(k => document.querySelector('[data-testid=lora-' + k + ']').textContent.trim())`);
    assert(cells.join(' ') === '4 6 6', `rank 4, 6 targets, 6 layers (got ${cells})`);
    assert(Number(lora[lora.length - 1]) === 2, 'the scale defaults to alpha / rank = 8 / 4');
    await click('[data-testid=add-init-state]');
    const shape = await waitFor('the initial state row', () => text('[data-testid=state-shape]'), 120_000);
    assert(shape.trim() === '6 layers × 4 heads × 64', `the state's shape (got ${shape})`);
    const active = await exec(`return document.querySelector('[data-testid=state-use]').checked`);
    assert(active, 'a new initial state is the chosen one');
    await screenshot('7-adapters');

    // A new chat takes them, greedy; then a chat on the base model says the same thing.
    const ask = async () => {
      await click('[data-testid=nav-chat]');
      // The view first opens the latest chat; only then start a new one (else that open lands last).
      await waitFor('the chat view to open a chat', () => findAll('[data-testid=chat-list] li.active').then((e) => e.length > 0));
      await click('[data-testid=new-chat]');
      await waitFor('the new chat', async () => (await text('.chat-title'))?.trim() === 'New chat' &&
        (await replies()).length === 0 && (await findAll('[data-testid=chat-input]:not([disabled])')).length > 0);
      await setSetting('[data-testid=set-temperature]', '0');
      await setSetting('[data-testid=set-max-tokens]', '24');
      await type('[data-testid=chat-input]', 'Where is the ship?');
      await click('[data-testid=send]');
      const r = await waitFor('the reply', async () => {
        const all = await replies();
        return all.length === 1 && all[0].stats ? all[0] : null;
      }, 300_000);
      return { reply: r, pills: (await text('[data-testid=chat-adapters]')) ?? '' };
    };
    const tuned = await ask();
    log(`with adapters [${tuned.pills.trim().replace(/\s+/g, ' ')}]: ${JSON.stringify(tuned.reply.text)}`);
    assert(tuned.pills.includes('demo-lora-r4.safetensors ×2') && tuned.pills.includes('state: demo-state.safetensors'),
      `the chat shows its adapters (got ${tuned.pills})`);
    assert(/tok\/s/.test(tuned.reply.stats), 'the reply has its stats');
    await screenshot('8-adapter-chat');

    await click('[data-testid=nav-model]');
    await click('[data-testid=lora-enabled]');
    await waitFor('the LoRA off', () => exec(`return !document.querySelector('[data-testid=lora-enabled]').checked`));
    await click('[data-testid=state-none]');
    await waitFor('no initial state', () => exec(`return document.querySelector('[data-testid=state-none]').checked`));
    const base = await ask();
    log(`base model: ${JSON.stringify(base.reply.text)}`);
    assert(base.pills.trim() === '', `the base chat shows no adapters (got ${base.pills})`);
    assert(base.reply.text !== tuned.reply.text, 'the adapters change the greedy reply');
  });

  await step('benchmarks: a run draws the charts', async () => {
    // The LoRA back on: the run applies it, and its row says so.
    await click('[data-testid=nav-model]');
    await click('[data-testid=lora-enabled]');
    await waitFor('the LoRA on', () => exec(`return document.querySelector('[data-testid=lora-enabled]').checked`));
    await click('[data-testid=nav-bench]');
    await setValue('[data-testid=bench-title]', 'e2e');
    await setValue('[data-testid=bench-prompt]', '64');
    await setValue('[data-testid=bench-decode]', '16');
    await click('[data-testid=bench-run]');
    // The engine's own plotters charts (rwkv_bench::charts), shown as SVG images.
    const size = await waitFor('the history chart', () => exec(
      `const img = document.querySelector('[data-testid=chart]');
       return img && img.complete && img.naturalWidth > 0 ? [img.naturalWidth, img.naturalHeight] : null;`,
    ), 900_000, 300);
    log(`history chart ${size[0]}×${size[1]}`);
    const profile = await exec(`const img = document.querySelector('[data-testid=profile-chart]'); return !!img && img.naturalWidth > 0;`);
    assert(profile, 'the per-op GPU profile chart is shown');
    // Readable at the default window: the charts' text is 12.5 SVG px
    // (rwkv_bench::charts::TEXT_PX), shown at clientWidth / naturalWidth of that.
    for (const id of ['chart', 'profile-chart']) {
      const scale = await exec(`const img = document.querySelector('[data-testid=${id}]'); return img.clientWidth / img.naturalWidth;`);
      log(`${id}: text ${(12.5 * scale).toFixed(1)} px on screen`);
      assert(12.5 * scale >= 11, `${id}: chart text ${(12.5 * scale).toFixed(1)} px on screen, want ≥ 11`);
    }
    const table = await text('[data-testid=bench-table]');
    assert(/tok\/s/.test(table), 'the run is listed with speeds');
    const ran = await text('[data-testid=bench-adapters]');
    assert(ran.includes('demo-lora-r4.safetensors ×2'), `the run names its LoRA (got ${ran})`);
    // The reloaded model is ready again.
    await waitFor('the model after the run', async () => (await text('[data-testid=model-status]'))?.includes('rwkv7-demo'));
    await screenshot('5-benchmarks');
  });

  await step('a truncated GGUF shows a readable error and the app stays usable', async () => {
    await click('[data-testid=nav-model]');
    await click('[data-testid=open-model]');
    const err = await waitFor('the error', () => text('[data-testid=error]'), 120_000);
    log(`error: ${err.trim().replace(/\s+/g, ' ')}`);
    const code = await exec(`return document.querySelector('[data-testid=error]').dataset.code`);
    assert(['malformed_file', 'io', 'not_rwkv7', 'missing_tensor'].includes(code), `an engine file error (got ${code})`);
    assert(/broken\.gguf/.test(err), 'the message names the file');
    const status = await text('[data-testid=model-status]');
    assert(status.includes('rwkv7-demo'), 'the loaded model is still loaded');
    await screenshot('6-broken-file');
    // Still usable: a chat reply works.
    await click('[data-testid=nav-chat]');
    const before = (await replies()).length;
    await type('[data-testid=chat-input]', 'And then?');
    await click('[data-testid=send]');
    await waitFor('a reply after the error', async () => {
      const r = await replies();
      return r.length > before && r[r.length - 1].stats;
    }, 300_000);
  });

  await step('local server: an OpenAI request from outside, counted in the panel; off frees the port', async () => {
    await click('[data-testid=nav-model]');
    await waitFor('the server panel', () => findAll('[data-testid=server-toggle]').then((e) => e.length > 0));
    // Port 0: the system picks a free one, and the panel shows it in the base URL.
    await setValue('[data-testid=server-port]', '0');
    await setValue('[data-testid=server-parallel]', '2');
    await click('[data-testid=server-toggle]');
    const base = (await waitFor('the base URL', () => text('[data-testid=server-url]'), 120_000)).trim();
    log(`server at ${base}`);
    assert(/^http:\/\/127\.0\.0\.1:\d+\/v1$/.test(base), `a loopback base URL (got ${base})`);
    // A real HTTP request from this process, as any OpenAI client would send it.
    const res = await fetch(`${base}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0 }),
      signal: AbortSignal.timeout(300_000),
    });
    const body = await res.json();
    assert(res.status === 200, `200 from /chat/completions (got ${res.status}: ${JSON.stringify(body)})`);
    const choice = body.choices?.[0];
    log(`server reply: ${JSON.stringify(choice?.message?.content)} (${choice?.finish_reason}), model ${body.model}`);
    assert((choice?.message?.content ?? '').length > 0 || !!choice?.finish_reason, 'a reply text or a finish reason');
    assert(body.model === 'rwkv7-demo-6x256-Q4_K_M', `the model id is the file's stem (got ${body.model})`);
    const requests = await waitFor('the request counted in the panel', async () => {
      const n = Number(await text('[data-testid=server-requests]'));
      return n >= 1 ? n : null;
    }, 15_000, 250);
    log(`panel: ${requests} request(s)`);
    await exec(`document.querySelector('[data-testid=server-card]').scrollIntoView({ block: 'center' })`);
    await screenshot('9-server');

    // The app's chat borrows the served model meanwhile.
    await click('[data-testid=nav-chat]');
    await waitFor('the chat input', () => findAll('[data-testid=chat-input]:not([disabled])').then((e) => e.length > 0));
    const before = (await replies()).length;
    await type('[data-testid=chat-input]', 'And the captain?');
    await click('[data-testid=send]');
    await waitFor('a chat reply while serving', async () => {
      const r = await replies();
      return r.length > before && r[r.length - 1].stats;
    }, 300_000);
    const again = await fetch(`${base}/models`, { signal: AbortSignal.timeout(60_000) });
    assert(again.status === 200, `the server answers after the chat (got ${again.status})`);

    await click('[data-testid=nav-model]');
    await waitFor('the panel on', async () => (await text('[data-testid=server-state]'))?.trim() === 'On');
    await click('[data-testid=server-toggle]');
    await waitFor('the panel off', async () => (await text('[data-testid=server-state]'))?.trim() === 'Off', 60_000);
    let refused = '';
    try {
      const r = await fetch(`${base}/models`, { signal: AbortSignal.timeout(10_000) });
      refused = `answered ${r.status}`;
    } catch (e) {
      refused = e.cause?.code ?? String(e);
    }
    log(`after switching off: ${refused}`);
    assert(refused === 'ECONNREFUSED', `the port is free: a connection is refused (got ${refused})`);
  });

  await step('library: a catalog model downloads with progress, survives a kill, resumes, loads and chats', async () => {
    const file = process.env.E2E_DOWNLOAD_FILE;
    const userCatalog = process.env.E2E_USER_CATALOG;
    const library = process.env.E2E_LIBRARY;
    assert(file && userCatalog && library, 'E2E_DOWNLOAD_FILE, E2E_USER_CATALOG and E2E_LIBRARY are set');
    const data = readFileSync(file);
    const name = 'rwkv7-demo-downloaded-Q4_K_M.gguf';
    const server = await startModelServer(data, name);
    // The hash computed here (node's crypto), not by the app: the app must match it.
    const sha256 = createHash('sha256').update(data).digest('hex');
    mkdirSync(dirname(userCatalog), { recursive: true });
    writeFileSync(userCatalog, JSON.stringify({
      version: 1,
      models: [{
        name: 'e2e-demo', family: 'RWKV-7 demo', parameters: '6x256', encoding: 'gguf-q4_k_m', file_name: name,
        size_bytes: data.length, sha256, urls: [server.url], license: 'Apache-2.0',
        ram_bytes: Math.round(data.length * 1.1), vram_bytes: Math.round(data.length * 1.1),
        description: 'The bundled demo model, served by the test over a throttled local HTTP server.',
        source: 'https://github.com/rwkv-studio/rwkv-studio/blob/main/tests/e2e/model_server.mjs',
      }],
    }, null, 2));
    log(`serving ${data.length} bytes at ${server.url}`);
    const part = join(library, `${name}.part`);

    await click('[data-testid=nav-library]');
    const row = '[data-testid=catalog-row][data-name=e2e-demo]';
    await waitFor('the catalog entry', () => findAll(row).then((e) => e.length > 0), 60_000);
    const rowText = await text(row);
    assert(rowText.includes('28.5 MB') && rowText.includes('Apache-2.0'), `size and licence shown (got ${rowText})`);
    assert((await findAll('[data-testid=catalog-row]')).length >= 6, 'the shipped entries are listed too');
    await exec(`document.querySelector(arguments[0]).scrollIntoView({ block: 'center' })`, row);
    await screenshot('10-catalog');

    await click(`${row} [data-testid=catalog-download]`);
    const dl = `[data-testid=download-row][data-file="${name}"]`;
    const shown = await waitFor('progress with a rate', async () => {
      const r = await exec(`const el = document.querySelector(arguments[0]);
        return el && el.dataset.state === 'running' && {
          bytes: el.querySelector('[data-testid=download-bytes]')?.textContent,
          rate: el.querySelector('[data-testid=download-rate]')?.textContent,
          eta: el.querySelector('[data-testid=download-eta]')?.textContent,
          bar: Number(el.querySelector('[role=progressbar]')?.getAttribute('aria-valuenow')) };`, dl);
      return r && /MB\/s/.test(r.rate ?? '') && r.bar >= 8 ? r : null;
    }, 30_000, 100);
    log(`progress: ${JSON.stringify(shown)}`);
    assert(/ of 28\.5 MB/.test(shown.bytes) && / s left/.test(shown.eta), 'bytes of the total and the time left are shown');
    // The downloads card opens the view: every scrolled ancestor back to its top.
    await exec(`for (const el of [document.querySelector('[data-testid=view-library]'), document.querySelector('main'),
      document.body, document.documentElement]) el.scrollTo({ top: 0, behavior: 'instant' });`);
    await waitFor('the view at its top', () => exec(`return document.querySelector('[data-testid=view-library]').scrollTop === 0`), 5_000, 50);
    await sleep(400); // a frame or two for the scroll to be painted
    await screenshot('11-download');

    // Kill the app (SIGKILL: no exit handler runs) once a quarter of the file is in the .part.
    await waitFor('a quarter in the .part', () => existsSync(part) && statSync(part).size >= data.length / 4, 60_000, 50);
    const pids = appPids();
    assert(pids.length === 1, `one app process (got ${pids})`);
    process.kill(pids[0], 'SIGKILL');
    await waitFor('the app to be gone', () => appPids().length === 0, 10_000, 50);
    await wd('DELETE', `/session/${session}`, undefined, 15_000).catch((e) => log(`closing the dead session: ${e.message}`));
    session = '';
    await sleep(300);
    const kept = statSync(part).size;
    const first = server.requests[0];
    log(`killed with ${kept} bytes in the .part; the server had sent ${first.served}`);
    assert(kept > 0 && kept < data.length, 'the app died mid-download');
    assert(!existsSync(join(library, name)), 'nothing under the final name');

    await startApp();
    // The paused download is offered at start (sidebar badge) and resumes from the .part.
    await waitFor('the downloads badge', async () => (await text('[data-testid=downloads-badge]'))?.trim() === '1', 60_000);
    await click('[data-testid=nav-library]');
    await waitFor('the paused download', () => exec(`return document.querySelector(arguments[0])?.dataset.state === 'paused'`, dl), 60_000);
    await click(`${dl} [data-testid=download-resume]`);
    const libRow = `[data-testid=library-row][data-file="${name}"]`;
    await waitFor('the model in the library', () => findAll(libRow).then((e) => e.length > 0), 120_000, 200);
    const requests = server.requests.map((r) => ({ range: r.range, status: r.status, served: r.served }));
    log(`server requests: ${JSON.stringify(requests)}`);
    assert(requests.length === 2, 'two requests: the first run and the resume');
    assert(requests[1].range === `bytes=${kept}-` && requests[1].status === 206, `the resume asks for bytes=${kept}- (got ${requests[1].range})`);
    assert(requests[1].served === data.length - kept, 'the resume fetched only the bytes the .part lacked');
    // The first response may have put a few chunks into the socket that the killed app
    // never read (they are the only bytes sent twice); nothing else.
    const lost = requests[0].served - kept;
    log(`sent but never read by the killed app: ${lost} bytes`);
    assert(lost >= 0 && lost < 2 * 1024 * 1024, `at most the socket's in-flight bytes were lost (${lost})`);
    assert(readFileSync(join(library, name)).equals(data), 'the library file is the served file, byte for byte');
    assert(!existsSync(part) && !existsSync(`${part}.json`), 'no .part left behind');

    // The restarted app loads the bundled model first; then the downloaded one replaces it.
    await waitFor('the bundled model loaded again', async () => (await text('[data-testid=model-status]'))?.includes('rwkv7-demo-6x256'), 600_000, 500);
    await click(`${libRow} [data-testid=library-load]`);
    await waitFor('the downloaded model loaded', async () => (await text('[data-testid=model-status]'))?.includes('rwkv7-demo-downloaded'), 600_000, 500);
    await click('[data-testid=nav-chat]');
    await waitFor('the chat input', () => findAll('[data-testid=chat-input]:not([disabled])').then((e) => e.length > 0));
    const before = (await replies()).length;
    await type('[data-testid=chat-input]', 'The ship came into the harbour');
    await click('[data-testid=send]');
    const reply = await waitFor('a reply from the downloaded model', async () => {
      const r = await replies();
      return r.length > before && r[r.length - 1].stats ? r[r.length - 1] : null;
    }, 300_000);
    log(`downloaded model replies: ${JSON.stringify(reply.text)} (${reply.stats})`);
    assert(/tok\/s/.test(reply.stats), 'the reply has its stats');
    await server.close();
  });
}

try {
  await main();
} catch (e) {
  if (!failed) {
    failed++;
    log(`✘ ${e.stack ?? e}`);
  }
} finally {
  if (session) await wd('DELETE', `/session/${session}`).catch(() => {});
  console.log(`${passed} passed, ${failed} failed`);
  // A smoke run that ran fewer than its steps did not check the app.
  const short = SMOKE && passed < SMOKE_STEPS.size;
  if (short) console.log(`smoke: ${passed} of ${SMOKE_STEPS.size} smoke steps ran`);
  process.exit(failed || short ? 1 : 0);
}
