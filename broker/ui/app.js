// trioq dashboard: one ES module, no framework, no build step.
// Safety rule: job data never becomes HTML. Every value reaches the page as a text node
// (el() children, textContent); innerHTML is never used.

const TOKEN_KEY = "trioq.token";
const STATES = ["waiting", "prioritized", "delayed", "active", "completed", "failed"];
const PAGE_SIZE = 25;
const CHART_SAMPLES = 150; // 5 minutes at one sample per 2 s
const SAMPLE_MS = 2000;
const RATE_WINDOW_MS = 10000;
const MAX_EVENT_ROWS = 500;

class AuthError extends Error {}

// -- DOM helpers -----------------------------------------------------------------------------

/** An element with attributes (on* keys become listeners) and text or element children. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const $ = (id) => document.getElementById(id);
const json = (value) => JSON.stringify(value, null, 2);
const fmtTime = (ms) => (ms ? new Date(ms).toLocaleString() : "—");
const fmtNum = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString());
const queueHref = (name) => `#/queue/${encodeURIComponent(name)}`;
const jobHref = (id) => `#/job/${encodeURIComponent(id)}`;

function fmtDuration(seconds) {
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

function notify(text, isError = false) {
  const box = $("notice");
  box.textContent = text;
  box.className = isError ? "notice error" : "notice";
  box.hidden = false;
}

function clearNotice() {
  $("notice").hidden = true;
}

/** Ask in an in-page dialog; resolves true when confirmed. */
function askConfirm(text) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

// -- HTTP API ------------------------------------------------------------------------------

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** Call the broker's HTTP API; throws AuthError on 401 and Error on other failures. */
async function api(method, path, body) {
  const headers = authHeaders();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) throw new AuthError("Unauthorized");
  const data = await response.json().catch(() => ({}));
  if (!response.ok || data.ok === false) {
    throw new Error(data.error || `${method} ${path} answered ${response.status}`);
  }
  return data;
}

const get = (path) => api("GET", path);
const post = (path, body) => api("POST", path, body ?? {});

// -- live events (SSE read through fetch, so the Bearer header can go with it) ---------------

const live = {
  listeners: new Set(),
  controller: null,
  lastId: null,
  connected: false,

  start() {
    if (this.controller) return;
    this.controller = new AbortController();
    this.run(this.controller.signal);
  },

  stop() {
    if (this.controller) this.controller.abort();
    this.controller = null;
    this.setConnected(false);
  },

  setConnected(connected) {
    this.connected = connected;
    const badge = $("live");
    badge.textContent = connected ? "● live" : "○ not live";
    badge.className = connected ? "live on" : "live";
  },

  async run(signal) {
    while (!signal.aborted) {
      try {
        const headers = authHeaders();
        if (this.lastId !== null) headers["Last-Event-ID"] = this.lastId;
        const response = await fetch("/events", { headers, signal });
        if (response.status === 401) return;
        this.setConnected(true);
        await this.read(response.body, signal);
      } catch (_) {
        // the stream broke or was aborted: reconnect below unless stopped
      }
      this.setConnected(false);
      if (!signal.aborted) await new Promise((r) => setTimeout(r, 3000));
    }
  },

  async read(body, signal) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    while (!signal.aborted) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        this.dispatch(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  },

  dispatch(block) {
    let id = null, name = null, data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("id: ")) id = line.slice(4);
      else if (line.startsWith("event: ")) name = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    if (id !== null) this.lastId = id;
    if (name === null || !data) return; // the greeting or a heartbeat
    // The stream carries each event's own data (the reference's form); the listeners get
    // it as a WebSocket subscriber would: {event, ts, data}.
    let body;
    try { body = JSON.parse(data); } catch (_) { return; }
    const ts = body && typeof body.timestamp === "number" ? body.timestamp : Date.now();
    const message = { event: name, ts, data: body };
    for (const listener of this.listeners) listener(message);
  },
};

// Per-queue jobs per second in and out, from the events of the last RATE_WINDOW_MS.
const rates = {
  seen: [], // [time, queue, "in" | "out"]
  note(message) {
    const kind = message.event;
    const direction = kind === "job:pushed" ? "in"
      : kind === "job:completed" || kind === "job:failed" ? "out" : null;
    if (direction) this.seen.push([Date.now(), message.data.queue, direction]);
  },
  of(queue) {
    const since = Date.now() - RATE_WINDOW_MS;
    this.seen = this.seen.filter(([t]) => t >= since);
    const count = (dir) => this.seen.filter(([, q, d]) => q === queue && d === dir).length;
    return { in: count("in") / (RATE_WINDOW_MS / 1000), out: count("out") / (RATE_WINDOW_MS / 1000) };
  },
};
live.listeners.add((message) => rates.note(message));

// Broker-wide samples for the chart: throughput in/out per second and total depth.
const history = {
  samples: [],
  last: null,
  add(stats, depth) {
    const now = Date.now();
    // Refreshes come on every burst of events too; the chart keeps one sample per SAMPLE_MS.
    if (this.last && now - this.last.time < SAMPLE_MS * 0.9) return;
    const out = stats.totalCompleted + stats.totalFailed;
    if (this.last) {
      const seconds = (now - this.last.time) / 1000;
      this.samples.push({
        time: now,
        in: Math.max(0, (stats.totalPushed - this.last.pushed) / seconds),
        out: Math.max(0, (out - this.last.out) / seconds),
        depth,
      });
      if (this.samples.length > CHART_SAMPLES) this.samples.shift();
    }
    this.last = { time: now, pushed: stats.totalPushed, out };
  },
};

// -- views ---------------------------------------------------------------------------------

let current = null; // the view shown: { refresh(), stop() }

function route() {
  const hash = decodeURI(location.hash || "#/");
  const [, page, ...rest] = hash.split("/");
  const arg = decodeURIComponent(rest.join("/"));
  if (page === "queue" && arg) return queueView(arg);
  if (page === "job" && arg) return jobView(arg);
  if (page === "events") return eventsView();
  return overviewView();
}

async function show() {
  if (current) current.stop();
  clearNotice();
  current = route();
  try {
    await current.refresh();
  } catch (error) {
    handleError(error);
  }
}

function handleError(error) {
  if (error instanceof AuthError) return showAuth();
  notify(error.message || String(error), true);
}

function setView(...children) {
  $("view").replaceChildren(...children.filter((child) => child !== null && child !== undefined));
}

function showAuth() {
  if (current) current.stop();
  live.stop();
  const had = sessionStorage.getItem(TOKEN_KEY) !== null;
  const input = el("input", { type: "password", id: "token", placeholder: "token", autocomplete: "off" });
  const form = el("form", {
    class: "panel auth",
    onsubmit: (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value);
      $("forget-token").hidden = false;
      live.start();
      show();
    },
  },
  el("h1", {}, "Token needed"),
  el("p", { id: "auth-reason" },
    had ? "The broker refused this token (401 Unauthorized). Enter the right one."
      : "This broker runs with --auth-token: every data call answered 401 Unauthorized. " +
        "Enter the token; it is kept for this tab only."),
  input,
  el("button", { class: "primary", type: "submit" }, "Use token"));
  setView(form);
  input.focus();
}

async function action(label, run, confirmText) {
  if (confirmText && !(await askConfirm(confirmText))) return;
  try {
    const reply = await run();
    notify(`${label}: ${describe(reply)}`);
    await current.refresh();
  } catch (error) {
    handleError(error);
  }
}

/** What a command did, in words, from its reply. */
function describe(reply) {
  if (typeof reply.count === "number") return `${reply.count} job(s) affected`;
  if (Array.isArray(reply.ids)) return `${reply.ids.length} job(s) affected`;
  if (reply.data && typeof reply.data.count === "number") return `${reply.data.count} job(s) affected`;
  return "done";
}

// Overview ----------------------------------------------------------------------------------

function overviewView() {
  let timer = null;
  let pending = false;
  const onEvent = () => {
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; view.refresh().catch(handleError); }, 400);
  };
  const view = {
    async refresh() {
      const [overview, queues] = await Promise.all([get("/dashboard"), get("/dashboard/queues?limit=500")]);
      const list = queues.data.queues;
      const depth = list.reduce((sum, q) => sum + q.waiting + q.prioritized + q.delayed + q.active, 0);
      history.add(overview.data.stats, depth);
      renderHealth(overview.data.broker);
      setView(
        el("h1", {}, "Overview"),
        statCards(overview.data.stats),
        chartPanel(),
        el("h2", {}, `Queues (${queues.data.total})`),
        queueTable(list),
        workersPanel(overview.data.workers),
      );
      drawChart();
      if (!timer) timer = setInterval(() => view.refresh().catch(handleError), SAMPLE_MS);
    },
    stop() {
      clearInterval(timer);
      live.listeners.delete(onEvent);
    },
  };
  live.listeners.add(onEvent);
  return view;
}

function renderHealth(broker) {
  const c = broker.connections;
  $("health").textContent =
    `v${broker.version} · up ${fmtDuration(broker.uptime)} · store ${broker.store} · ` +
    `${c.tcp} tcp / ${c.websocket} ws / ${c.sse} sse · ${broker.role}`;
}

function statCards(stats) {
  const card = (label, value) => el("div", { class: "card" },
    el("div", { class: "label" }, label), el("div", { class: "value" }, fmtNum(value)));
  return el("div", { class: "cards", id: "stats" },
    card("Waiting", stats.waiting), card("Active", stats.active), card("Delayed", stats.delayed),
    card("Completed", stats.completed), card("Failed (DLQ)", stats.dlq),
    card("Pushed since start", stats.totalPushed), card("Done since start", stats.totalCompleted),
    card("Failed since start", stats.totalFailed));
}

function chartPanel() {
  return el("div", { class: "panel" },
    el("div", { class: "legend" },
      el("span", {}, el("i", { style: "background:#2f6fde" }), "in /s"),
      el("span", {}, el("i", { style: "background:#1f9d55" }), "out /s"),
      el("span", {}, el("i", { style: "background:#c77c02" }), "depth (right axis)"),
      el("span", {}, "last 5 minutes")),
    el("canvas", { id: "chart", class: "chart", width: 1200, height: 180 }));
}

function drawChart() {
  const canvas = $("chart");
  if (!canvas) return;
  const ctx = canvas.getContext("2d");
  const { width, height } = canvas;
  ctx.clearRect(0, 0, width, height);
  ctx.strokeStyle = "#e3e6ec";
  for (let i = 1; i < 4; i++) {
    ctx.beginPath(); ctx.moveTo(0, (height * i) / 4); ctx.lineTo(width, (height * i) / 4); ctx.stroke();
  }
  const samples = history.samples;
  if (samples.length < 2) return;
  const rateMax = Math.max(1, ...samples.map((s) => Math.max(s.in, s.out)));
  const depthMax = Math.max(1, ...samples.map((s) => s.depth));
  const x = (i) => (i / (CHART_SAMPLES - 1)) * width;
  const line = (color, pick, max) => {
    ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
    const offset = CHART_SAMPLES - samples.length;
    samples.forEach((s, i) => {
      const y = height - 4 - (pick(s) / max) * (height - 8);
      i ? ctx.lineTo(x(i + offset), y) : ctx.moveTo(x(i + offset), y);
    });
    ctx.stroke();
  };
  line("#2f6fde", (s) => s.in, rateMax);
  line("#1f9d55", (s) => s.out, rateMax);
  line("#c77c02", (s) => s.depth, depthMax);
  ctx.fillStyle = "#667085"; ctx.font = "12px system-ui";
  ctx.fillText(`${rateMax.toFixed(1)}/s`, 4, 14);
  ctx.textAlign = "right";
  ctx.fillText(`${depthMax} jobs`, width - 4, height - 6);
  ctx.textAlign = "left";
}

function queueTable(queues) {
  if (!queues.length) {
    return el("p", { class: "muted", id: "no-queues" },
      "No queues yet. Push a job (TCP PUSH, or POST /queues/<name>/jobs) and it appears here.");
  }
  const head = el("tr", {}, ["Queue", "Waiting", "Prioritized", "Delayed", "Active", "Failed",
    "Rate limit", "Concurrency", "In /s", "Out /s"].map((h, i) => el("th", { class: i ? "num" : "" }, h)));
  const rows = queues.map((q) => {
    const r = rates.of(q.name);
    return el("tr", { "data-queue": q.name },
      el("td", {}, el("a", { href: queueHref(q.name) }, q.name), " ",
        q.paused ? el("span", { class: "badge paused" }, "paused") : null),
      ...[q.waiting, q.prioritized, q.delayed, q.active, q.dlq].map((n, i) =>
        el("td", { class: "num", "data-count": STATES[i === 4 ? 5 : i] }, fmtNum(n))),
      el("td", { class: "num" }, q.limits.rateLimit === null ? "—" : `${q.limits.rateLimit}/s`),
      el("td", { class: "num" }, fmtNum(q.limits.concurrencyLimit)),
      el("td", { class: "num" }, r.in.toFixed(1)),
      el("td", { class: "num" }, r.out.toFixed(1)));
  });
  return el("table", { id: "queues" }, el("thead", {}, head), el("tbody", {}, rows));
}

function workersPanel(workers) {
  return el("p", { class: "muted" }, `Workers: ${workers.active} active of ${workers.total} registered.`);
}

// Queue page --------------------------------------------------------------------------------

function queueView(name) {
  const path = `/queues/${encodeURIComponent(name)}`;
  let state = "waiting";
  let offset = 0;
  const view = {
    async refresh() {
      const [info, jobs, dlq, crons, workers] = await Promise.all([
        get(`/dashboard${path}`),
        get(`${path}/jobs/list?state=${state}&limit=${PAGE_SIZE}&offset=${offset}`),
        get(`${path}/dlq?count=100`),
        get("/crons"),
        get(`${path}/workers`),
      ]);
      const data = info.data;
      setView(
        el("p", {}, el("a", { href: "#/" }, "← Overview")),
        el("h1", {}, "Queue ", el("span", { id: "queue-name" }, name), " ",
          data.paused ? el("span", { class: "badge paused", id: "paused-badge" }, "paused") : null),
        countCards(data.counts),
        queueActions(path, data),
        el("h2", {}, "Jobs"),
        searchBox(),
        stateTabs(data.counts),
        jobTable(jobs.jobs),
        pager(jobs.jobs.length),
        el("h2", {}, `Dead letters (${dlq.jobs.length})`),
        dlqPanel(path, dlq.jobs),
        el("div", { class: "grid2" },
          el("div", {}, el("h2", {}, "Cron schedules"), cronTable(crons.crons.filter((c) => c.queue === name))),
          el("div", {}, el("h2", {}, "Workers seen"), workerTable(workers.workers))),
      );
    },
    stop() {},
  };

  function stateTabs(counts) {
    return el("div", { class: "tabs", role: "tablist" }, STATES.map((s) =>
      el("button", {
        type: "button", "aria-pressed": String(s === state), "data-state": s,
        onclick: () => { state = s; offset = 0; view.refresh().catch(handleError); },
      }, `${s} (${fmtNum(counts[s])})`)));
  }

  function pager(shown) {
    return el("div", { class: "actions" },
      el("button", { type: "button", disabled: offset === 0,
        onclick: () => { offset = Math.max(0, offset - PAGE_SIZE); view.refresh().catch(handleError); } }, "← Newer"),
      el("span", { class: "muted" }, shown ? `${offset + 1}–${offset + shown}` : "none"),
      el("button", { type: "button", disabled: shown < PAGE_SIZE,
        onclick: () => { offset += PAGE_SIZE; view.refresh().catch(handleError); } }, "Older →"));
  }

  return view;
}

function countCards(counts) {
  return el("div", { class: "cards" }, Object.entries(counts).map(([label, value]) =>
    el("div", { class: "card", "data-count": label },
      el("div", { class: "label" }, label), el("div", { class: "value" }, fmtNum(value)))));
}

function queueActions(path, data) {
  const cleanState = el("select", { id: "clean-state" },
    ["completed", "failed", "waiting", "delayed"].map((s) => el("option", { value: s }, s)));
  return el("div", { class: "panel" },
    el("div", { class: "actions" },
      data.paused
        ? el("button", { type: "button", id: "resume", onclick: () => action("Resumed", () => post(`${path}/resume`)) }, "Resume")
        : el("button", { type: "button", id: "pause", onclick: () => action("Paused", () => post(`${path}/pause`)) }, "Pause"),
      el("button", { type: "button", class: "danger", id: "drain",
        onclick: () => action("Drained", () => post(`${path}/drain`),
          "Drain: remove every waiting and delayed job of this queue?") }, "Drain"),
      el("span", { class: "muted" }, "Clean"), cleanState,
      el("button", { type: "button", class: "danger", id: "clean",
        onclick: () => action("Cleaned", () => post(`${path}/clean`, { state: cleanState.value, grace: 0 }),
          `Clean: remove every ${cleanState.value} job of this queue?`) }, "Clean"),
      el("button", { type: "button", class: "danger", id: "obliterate",
        onclick: () => action("Obliterated", () => post(`${path}/obliterate`),
          "Obliterate: remove this queue and ALL its jobs?") }, "Obliterate")),
    el("p", { class: "muted" },
      `Rate limit: ${data.limits.rateLimit === null ? "none" : `${data.limits.rateLimit}/s`} · ` +
      `Concurrency: ${data.limits.concurrencyLimit === null ? "unlimited" : data.limits.concurrencyLimit}`));
}

function searchBox() {
  const input = el("input", { id: "search", placeholder: "job id or custom id", size: 36 });
  const find = async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    for (const path of [`/jobs/${encodeURIComponent(key)}`, `/jobs/custom/${encodeURIComponent(key)}`]) {
      try {
        const found = await get(path);
        location.hash = jobHref(found.job.id);
        return;
      } catch (error) {
        if (error instanceof AuthError) return handleError(error);
      }
    }
    notify(`No job with id or custom id ${key}`, true);
  };
  return el("form", { class: "actions", onsubmit: find }, input, el("button", { type: "submit" }, "Find"));
}

function preview(data) {
  const text = JSON.stringify(data);
  return text === undefined ? "" : text.length > 80 ? `${text.slice(0, 80)}…` : text;
}

function jobTable(jobs) {
  if (!jobs.length) return el("p", { class: "muted", id: "no-jobs" }, "No jobs in this state.");
  return el("table", { id: "jobs" },
    el("thead", {}, el("tr", {}, ["Id", "Name", "Data", "Attempts", "Priority", "Created"].map((h) => el("th", {}, h)))),
    el("tbody", {}, jobs.map((job) => el("tr", { "data-job": job.id },
      el("td", {}, el("a", { href: jobHref(job.id) }, job.id)),
      el("td", {}, job.name),
      el("td", { class: "muted" }, preview(job.data)),
      el("td", { class: "num" }, `${job.attempts}/${job.maxAttempts}`),
      el("td", { class: "num" }, job.priority),
      el("td", {}, fmtTime(job.createdAt))))));
}

function failureOf(job) {
  if (job.failedReason) return job.failedReason;
  const failed = [...(job.timeline || [])].reverse().find((t) => t.error);
  return failed ? failed.error : "—";
}

function dlqPanel(path, jobs) {
  const actions = el("div", { class: "actions" },
    el("button", { type: "button", id: "dlq-retry-all", disabled: !jobs.length,
      onclick: () => action("Retried", () => post(`${path}/dlq/retry`)) }, "Retry all"),
    el("button", { type: "button", class: "danger", id: "dlq-purge", disabled: !jobs.length,
      onclick: () => action("Purged", () => post(`${path}/dlq/purge`),
        "Purge: delete every job in this queue's dead-letter list?") }, "Purge"));
  if (!jobs.length) return el("div", {}, actions, el("p", { class: "muted", id: "dlq-empty" }, "No failed jobs."));
  return el("div", {}, actions, el("table", { id: "dlq" },
    el("thead", {}, el("tr", {}, ["Id", "Failure", "Attempts", "Failed at", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, jobs.map((job) => el("tr", { "data-job": job.id },
      el("td", {}, el("a", { href: jobHref(job.id) }, job.id)),
      el("td", { class: "failure" }, failureOf(job)),
      el("td", { class: "num" }, job.attempts),
      el("td", {}, fmtTime(job.completedAt)),
      el("td", {}, el("button", { type: "button", class: "retry",
        onclick: () => action("Retried", () => post(`${path}/dlq/retry`, { jobId: job.id })) }, "Retry")))))));
}

function cronTable(crons) {
  if (!crons.length) return el("p", { class: "muted" }, "No cron schedules for this queue.");
  return el("table", {},
    el("thead", {}, el("tr", {}, ["Name", "Schedule", "Next run", "Runs"].map((h) => el("th", {}, h)))),
    el("tbody", {}, crons.map((c) => el("tr", {},
      el("td", {}, c.name),
      el("td", {}, c.schedule || `every ${c.repeatEvery} ms`),
      el("td", {}, fmtTime(c.nextRun)),
      el("td", { class: "num" }, fmtNum(c.executions))))));
}

function workerTable(workers) {
  if (!workers.length) return el("p", { class: "muted" }, "No live workers registered for this queue.");
  return el("table", {},
    el("thead", {}, el("tr", {}, ["Id", "Name", "Active jobs", "Last seen"].map((h) => el("th", {}, h)))),
    el("tbody", {}, workers.map((w) => el("tr", {},
      el("td", {}, w.id), el("td", {}, w.name ?? "—"),
      el("td", { class: "num" }, fmtNum(w.activeJobs)), el("td", {}, fmtTime(w.lastSeen))))));
}

// Job page --------------------------------------------------------------------------------

function jobView(id) {
  const path = `/jobs/${encodeURIComponent(id)}`;
  const view = {
    async refresh() {
      const [found, logs] = await Promise.all([get(path), get(`${path}/logs`).catch(() => null)]);
      const job = found.job;
      const queuePath = `/queues/${encodeURIComponent(job.queue)}`;
      const priority = el("input", { type: "number", id: "priority", value: job.priority, style: "width:6rem" });
      setView(
        el("p", {}, el("a", { href: queueHref(job.queue) }, `← Queue ${job.queue}`)),
        el("h1", {}, "Job ", el("span", { id: "job-id" }, job.id), " ",
          el("span", { class: `badge ${job.state}`, id: "job-state" }, job.state)),
        el("div", { class: "panel actions" },
          job.state === "failed"
            ? el("button", { type: "button", class: "primary", id: "retry",
              onclick: () => action("Retried", () => post(`${queuePath}/dlq/retry`, { jobId: job.id })) }, "Retry")
            : null,
          el("button", { type: "button", id: "promote",
            onclick: () => action("Promoted", () => post(`${path}/promote`)) }, "Promote"),
          el("button", { type: "button", class: "danger", id: "discard",
            onclick: () => action("Discarded", () => post(`${path}/discard`), "Discard this job?") }, "Discard"),
          el("span", { class: "muted" }, "Priority"), priority,
          el("button", { type: "button", id: "set-priority",
            onclick: () => action("Priority changed",
              () => api("PUT", `${path}/priority`, { priority: Number(priority.value) })) }, "Set")),
        outcome(job),
        el("h2", {}, "Timeline"), timeline(job.timeline || []),
        el("div", { class: "grid2" },
          el("div", {}, el("h2", {}, "Data"), el("pre", { id: "job-data" }, json(job.data))),
          el("div", {}, el("h2", {}, "Options"), el("pre", { id: "job-options" }, json(options(job))))),
        family(job),
        el("h2", {}, "Logs"), logList(logs),
      );
    },
    stop() {},
  };
  return view;
}

function outcome(job) {
  if (job.state === "failed" || job.failedReason || job.stacktrace) {
    return el("div", { class: "panel" },
      el("h2", {}, `Error (attempt ${job.attempts} of ${job.maxAttempts})`),
      el("p", { id: "job-error" }, failureOf(job)),
      job.stacktrace ? el("pre", { id: "job-stack" }, job.stacktrace.join("\n")) : null);
  }
  if (job.state === "completed") {
    return el("div", { class: "panel" }, el("h2", {}, "Result"), el("pre", { id: "job-result" }, json(job.returnvalue)));
  }
  return el("p", { class: "muted" }, `Attempts: ${job.attempts} of ${job.maxAttempts}. ` +
    `Progress: ${job.progress}${job.progressMessage ? ` (${job.progressMessage})` : ""}.`);
}

function options(job) {
  const keys = ["name", "priority", "lifo", "maxAttempts", "backoff", "backoffConfig", "runAt", "ttl",
    "timeout", "uniqueKey", "customId", "groupId", "tags", "removeOnComplete", "removeOnFail",
    "stallTimeout", "repeat", "durable"];
  return Object.fromEntries(keys.filter((k) => job[k] !== null && job[k] !== undefined).map((k) => [k, job[k]]));
}

function timeline(entries) {
  if (!entries.length) return el("p", { class: "muted" }, "No timeline recorded.");
  return el("ol", { class: "timeline", id: "timeline" }, entries.map((t) =>
    el("li", {}, el("strong", {}, t.state), " ", el("span", { class: "muted" }, fmtTime(t.timestamp)),
      t.error ? el("span", {}, ` · ${t.error}`) : null)));
}

function family(job) {
  const parent = job.parentId ? el("p", {}, "Parent: ", el("a", { href: jobHref(job.parentId) }, job.parentId)) : null;
  const children = (job.childrenIds || []).length
    ? el("p", {}, "Children: ", job.childrenIds.map((c) => [el("a", { href: jobHref(c) }, c), " "]))
    : null;
  if (!parent && !children) return null;
  return el("div", {}, el("h2", {}, "Flow"), parent, children);
}

function logList(logs) {
  const entries = logs && logs.data ? logs.data.logs : [];
  if (!entries.length) return el("p", { class: "muted" }, "No logs.");
  return el("table", {}, el("tbody", {}, entries.map((l) => el("tr", {},
    el("td", {}, fmtTime(l.timestamp)), el("td", {}, l.level ?? ""), el("td", {}, l.message)))));
}

// Live events -------------------------------------------------------------------------------

function eventsView() {
  const rows = el("tbody", {});
  const queueFilter = el("input", { id: "filter-queue", placeholder: "queue (all)" });
  const kindFilter = el("select", { id: "filter-kind" }, el("option", { value: "" }, "every kind"),
    ["pushed", "active", "progress", "completed", "failed", "retried", "delayed", "stalled", "removed"]
      .map((k) => el("option", { value: `job:${k}` }, k)));
  const status = el("span", { class: "muted", id: "events-status" });
  const onEvent = (message) => {
    if (document.hidden || !message.event.startsWith("job:")) return;
    if (queueFilter.value && message.data.queue !== queueFilter.value) return;
    if (kindFilter.value && message.event !== kindFilter.value) return;
    const extra = { ...message.data };
    delete extra.queue; delete extra.jobId;
    rows.prepend(el("tr", {},
      el("td", {}, new Date(message.ts).toLocaleTimeString()),
      el("td", {}, el("span", { class: `badge ${message.event.slice(4)}` }, message.event.slice(4))),
      el("td", {}, el("a", { href: queueHref(message.data.queue) }, message.data.queue)),
      el("td", {}, el("a", { href: jobHref(message.data.jobId) }, message.data.jobId)),
      el("td", { class: "muted" }, Object.keys(extra).length ? JSON.stringify(extra) : "")));
    while (rows.children.length > MAX_EVENT_ROWS) rows.lastChild.remove();
  };
  const onVisibility = () => {
    status.textContent = document.hidden ? "paused while the tab is hidden" : "showing events as they happen";
  };
  return {
    async refresh() {
      await get("/dashboard/queues?limit=1"); // asks for the token when one is needed
      onVisibility();
      setView(el("h1", {}, "Live events"),
        el("div", { class: "actions" }, queueFilter, kindFilter, status,
          el("button", { type: "button", onclick: () => rows.replaceChildren() }, "Clear")),
        el("table", { class: "events", id: "events" },
          el("thead", {}, el("tr", {}, ["Time", "Kind", "Queue", "Job", "Details"].map((h) => el("th", {}, h)))),
          rows));
      live.listeners.add(onEvent);
      document.addEventListener("visibilitychange", onVisibility);
    },
    stop() {
      live.listeners.delete(onEvent);
      document.removeEventListener("visibilitychange", onVisibility);
    },
  };
}

// -- start ---------------------------------------------------------------------------------

// A hidden tab stops the live stream; back in view, it resumes from the last event id.
document.addEventListener("visibilitychange", () => (document.hidden ? live.stop() : live.start()));
$("forget-token").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
});
$("forget-token").hidden = sessionStorage.getItem(TOKEN_KEY) === null;
window.addEventListener("hashchange", show);
live.start();
show();
