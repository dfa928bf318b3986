// The viewer page (docs/operations.md, the viewer), on @runstream/client's browser build:
// threads and runs from History, the chat view (`view: "chat"`) merged by ChatView into
// bubbles, and trace and lifecycle events from a second subscription. Both subscriptions
// resume from their own cursor across reconnects, so a broker restart leaves no gap and no
// duplicate. Event data is only ever put in the page as text (textContent), never as HTML.
import { ChatView, HistoryClient, subscribe } from './client/index.js';

const $ = (id) => document.getElementById(id);
const WS_URL = `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/v1/ws`;
const ROLES = new Set(['human', 'assistant', 'tool', 'system']);
const STATUSES = new Set(['pending', 'running', 'success', 'error', 'interrupted', 'cancelled']);
const MAX_EVENT_ROWS = 2000;
const MAX_THREADS = 2000;
const MAX_CONTENT_CHARS = 2000;
const BACKOFF = { initialDelayMs: 100, maxDelayMs: 2000 };

const state = {
  token: sessionStorage.getItem('runstream.token') ?? '',
  thread: undefined,
  subs: [],
  chat: undefined,
  bubbles: new Map(),
  runsTimer: undefined,
  /** Caught up (a `live` came since the last reconnect), and the highest seq shown. */
  live: false,
  seq: 0,
};

const historyClient = new HistoryClient({ url: location.origin, getToken: () => state.token });

/** An element with a class and text; text is never parsed as HTML. */
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = String(text);
  return e;
}

/** While live, the header follows the highest seq either subscription delivered. */
function seen(seq) {
  state.seq = Math.max(state.seq, seq);
  if (state.live) setStatus('live', `live · seq ${state.seq}`);
}

function setStatus(kind, text) {
  if (kind !== 'live') state.live = false;
  const s = $('status');
  s.dataset.state = kind;
  s.textContent = text;
}

function needToken(message) {
  $('auth').hidden = false;
  $('auth-hint').textContent = message;
  setStatus('auth', 'a token is needed');
}

function isAuthError(err) {
  return err?.status === 401 || err?.code === 'unauthenticated' || err?.code === 'permission_denied';
}

// --- threads -------------------------------------------------------------------------

async function loadThreads() {
  const headers = state.token ? { authorization: `Bearer ${state.token}` } : {};
  const threads = [];
  let more = false;
  try {
    // Page by page (in thread id order), up to MAX_THREADS.
    let after;
    do {
      const q = new URLSearchParams({ limit: '500', ...(after === undefined ? {} : { after }) });
      const res = await fetch(`/v1/threads?${q}`, { headers });
      const body = await res.json();
      if (res.status === 401) return needToken(body?.error?.message ?? 'this broker requires a token');
      if (!res.ok) throw new Error(body?.error?.message ?? `HTTP ${res.status}`);
      threads.push(...body.threads);
      more = body.has_more;
      after = body.next_after;
    } while (more && threads.length < MAX_THREADS);
  } catch (err) {
    $('threads-note').textContent = `threads: ${err.message}`;
    return;
  }
  $('threads-note').textContent =
    threads.length === 0 ? 'no threads yet' : more ? `the first ${threads.length} threads` : '';
  const list = $('threads');
  list.replaceChildren(
    ...threads.map((t) => {
      const li = el('li');
      const b = el('button', 'thread');
      b.type = 'button';
      b.dataset.thread = t.thread_id;
      if (t.thread_id === state.thread) b.classList.add('selected');
      b.append(el('span', 'thread-id', t.thread_id), statusBadge(t.last_run_status));
      b.append(el('span', 'meta', `${t.run_count} runs · seq ${t.head_seq}`));
      b.addEventListener('click', () => openThread(t.thread_id, readAfterSeq()));
      li.append(b);
      return li;
    }),
  );
}

function statusBadge(status) {
  return el('span', `badge status-${STATUSES.has(status) ? status : 'unknown'}`, status ?? '?');
}

// --- runs ----------------------------------------------------------------------------

async function loadRuns() {
  const thread = state.thread;
  if (thread === undefined) return;
  try {
    const page = await historyClient.listRuns(thread, { limit: 50 });
    if (thread !== state.thread) return;
    $('runs').replaceChildren(
      ...page.runs.map((r) => {
        const li = el('li', 'run');
        li.dataset.run = r.run_id;
        li.append(el('span', 'run-id', r.run_id), statusBadge(r.status));
        li.append(el('span', 'meta', `seq ${r.first_seq}–${r.last_seq} · ${r.event_count} events`));
        return li;
      }),
    );
  } catch (err) {
    if (isAuthError(err)) needToken(err.message);
  }
}

function scheduleRuns() {
  clearTimeout(state.runsTimer);
  state.runsTimer = setTimeout(loadRuns, 300);
}

// --- a thread: chat bubbles and events -------------------------------------------------

function readAfterSeq() {
  const n = Number($('after-seq').value);
  return Number.isSafeInteger(n) && n >= 0 ? n : 0;
}

function closeThread() {
  for (const s of state.subs) s.close();
  state.subs = [];
}

function openThread(thread, afterSeq) {
  closeThread();
  state.thread = thread;
  state.chat = new ChatView([], afterSeq);
  state.bubbles = new Map();
  state.live = false;
  state.seq = afterSeq;
  $('chat').replaceChildren();
  $('events').replaceChildren();
  $('runs').replaceChildren();
  $('thread-title').textContent = thread;
  $('after-seq').value = String(afterSeq);
  for (const b of document.querySelectorAll('button.thread')) {
    b.classList.toggle('selected', b.dataset.thread === thread);
  }
  const url = new URL(location.href);
  url.searchParams.set('thread', thread);
  url.searchParams.set('after_seq', String(afterSeq));
  window.history.replaceState(null, '', url);
  setStatus('connecting', `connecting to ${thread}…`);
  const common = {
    url: WS_URL,
    threadId: thread,
    afterSeq,
    backoff: BACKOFF,
    getToken: () => state.token,
  };
  state.subs = [
    subscribe({ ...common, view: 'chat', onItem: (item) => onChatItem(thread, item) }),
    subscribe({ ...common, categories: ['trace', 'lifecycle'], onItem: (item) => onEventItem(thread, item) }),
  ];
  void loadRuns();
}

/** The chat subscription's items: bubbles, and the connection state shown in the header. */
function onChatItem(thread, item) {
  if (thread !== state.thread) return;
  switch (item.type) {
    case 'chat':
      renderMessage(state.chat.apply(item.frame));
      seen(item.frame.seq);
      break;
    case 'live':
      state.chat.advance(item.seq);
      state.live = true;
      seen(item.seq);
      scheduleRuns();
      break;
    case 'reconnecting':
      state.live = false;
      document.body.dataset.reconnects = String(Number(document.body.dataset.reconnects) + 1);
      setStatus(
        'reconnecting',
        `reconnecting (attempt ${item.attempt}) from seq ${item.cursor ?? 0}: ${item.reason}`,
      );
      break;
    case 'deleted':
      setStatus('ended', item.runId ? `run ${item.runId} deleted` : 'thread deleted');
      break;
    case 'error':
      if (isAuthError(item.error)) needToken(item.error.message);
      else if (!item.retrying) setStatus('error', `${item.error.code}: ${item.error.message}`);
      break;
  }
}

/** The trace and lifecycle subscription's items: event rows; a lifecycle event reloads the runs. */
function onEventItem(thread, item) {
  if (thread !== state.thread || item.type !== 'event') return;
  const e = item.event;
  const row = el('li', `ev cat-${e.category === 'trace' ? 'trace' : 'lifecycle'}`);
  row.dataset.seq = String(e.seq);
  row.append(
    el('span', 'seq', e.seq),
    el('span', 'type', e.event_type),
    el('span', 'run-id', e.run_id),
    el('code', 'content', clip(JSON.stringify(e.content))),
  );
  const list = $('events');
  const pane = $('events-pane');
  const atBottom = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 40;
  list.append(row);
  while (list.childElementCount > MAX_EVENT_ROWS) list.firstElementChild.remove();
  if (atBottom) pane.scrollTop = pane.scrollHeight;
  if (e.category === 'lifecycle') scheduleRuns();
  seen(e.seq);
}

function clip(text) {
  const t = text ?? '';
  return t.length > MAX_CONTENT_CHARS ? `${t.slice(0, MAX_CONTENT_CHARS)}…` : t;
}

function renderMessage(m) {
  let b = state.bubbles.get(m.first_seq);
  const chat = $('chat');
  const atBottom = chat.scrollTop + chat.clientHeight >= chat.scrollHeight - 40;
  if (b === undefined) {
    const role = ROLES.has(m.role) ? m.role : 'system';
    b = el('article', `bubble role-${role}`);
    b.dataset.firstSeq = String(m.first_seq);
    b.dataset.messageId = m.id;
    const head = el('header', 'who', role === 'tool' ? `tool ${m.name ?? ''}`.trim() : role);
    head.append(el('span', 'run-id', m.run_id));
    b.append(head, el('div', 'text'), el('div', 'tool-calls'));
    state.bubbles.set(m.first_seq, b);
    chat.append(b);
  }
  b.dataset.lastSeq = String(m.last_seq);
  b.querySelector('.text').textContent = m.content;
  if (m.role === 'tool' && m.is_error) b.classList.add('is-error');
  const calls = m.tool_calls ?? [];
  b.querySelector('.tool-calls').replaceChildren(
    ...calls.map((c) => {
      const d = el('div', 'tool-call');
      d.dataset.callId = c.id;
      d.append(el('span', 'tool-name', `→ ${c.name}`), el('code', 'tool-args', clip(c.arguments)));
      return d;
    }),
  );
  if (atBottom) chat.scrollTop = chat.scrollHeight;
}

// --- controls ---------------------------------------------------------------------------

$('open').addEventListener('submit', (ev) => {
  ev.preventDefault();
  if (state.thread !== undefined) openThread(state.thread, readAfterSeq());
});
$('refresh').addEventListener('click', () => void loadThreads());
for (const cat of ['trace', 'lifecycle']) {
  const box = $(`show-${cat}`);
  box.addEventListener('change', () => $('events-pane').classList.toggle(`hide-${cat}`, !box.checked));
}
$('auth').addEventListener('submit', (ev) => {
  ev.preventDefault();
  state.token = $('token').value.trim();
  sessionStorage.setItem('runstream.token', state.token);
  $('auth-hint').textContent = '';
  void loadThreads();
  if (state.thread !== undefined) openThread(state.thread, readAfterSeq());
});
if (state.token) $('auth').hidden = false;

const params = new URLSearchParams(location.search);
const initial = params.get('thread');
if (initial) {
  $('after-seq').value = params.get('after_seq') ?? '0';
  openThread(initial, readAfterSeq());
}
void loadThreads();
setInterval(() => void loadThreads(), 5000);
document.body.dataset.ready = 'true';
